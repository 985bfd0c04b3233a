//! A CPU tier's invariants (`CpuTier::check_invariants`, also checked after each change in debug
//! builds).

use std::collections::HashSet;

use super::access::SEEN;
use super::group::{Rank, run_key};
use super::{CpuTier, Eviction, KeySet};
use crate::{BlockKey, KvError, Result};

impl CpuTier {
    /// The invariants checked after every mutation in debug builds (`cfg!`, not `#[cfg]`: the release
    /// body is the same code, folded away, so `self` stays used and both builds pass clippy's `unused_self`).
    #[inline]
    pub(super) fn debug_check(&self) {
        if cfg!(debug_assertions) {
            if let Err(e) = self.check_invariants() {
                panic!("{e}");
            }
        }
    }

    /// Checks the invariants listed on [`CpuTier`]; `KvError::Internal` (a bug) if one fails.
    pub fn check_invariants(&self) -> Result<()> {
        self.invariants()
            .map_err(|m| KvError::Internal(format!("CPU tier invariant broken: {m}")))
    }

    fn invariants(&self) -> std::result::Result<(), String> {
        self.chunks.check()?;
        let evictable = self.chunks.values().filter(|c| c.evictable()).count() as u64
            + self.lane_len
            + self
                .owns
                .iter()
                .filter(|o| o.ready)
                .map(|o| u64::from(o.n))
                .sum::<u64>();
        if evictable != self.num_evictable {
            return Err(format!(
                "num_evictable is {} but {evictable} chunks are evictable",
                self.num_evictable
            ));
        }
        if self.used() > self.capacity {
            return Err(format!(
                "{} chunks held, capacity {}",
                self.used(),
                self.capacity
            ));
        }
        self.lane_invariants()?;
        self.own_invariants()?;
        self.counts.check("the tracker")?;
        if self.counts.len() > self.tracker || (self.threshold == 0 && self.counts.len() > 0) {
            return Err(format!(
                "the tracker holds {} keys (size {}, threshold {})",
                self.counts.len(),
                self.tracker,
                self.threshold
            ));
        }
        self.chunks.recs.check()?;
        let recs: Vec<u64> = self.chunks.recs.iter().map(|(rid, _)| rid).collect();
        if let Some(rid) = recs.iter().find(|rid| self.accesses.contains_key(rid)) {
            return Err(format!("request {rid} has two records"));
        }
        if !recs.is_empty() && (self.eviction == Eviction::Arc || self.threshold > 0) {
            return Err("a one-run record kept under ARC or a threshold".to_string());
        }
        for (rid, a) in &self.accesses {
            let checked = &a.order[..a.checked];
            let seen = if a.mapped {
                a.flags.values().filter(|&&f| f & SEEN != 0).count()
            } else {
                checked.iter().map(|&(k, _)| k).collect::<KeySet>().len()
            };
            if a.checked != seen
                || checked.iter().any(|&(k, _)| !a.seen(k))
                || (self.eviction == Eviction::Arc && a.checked != a.order.len())
            {
                return Err(format!(
                    "request {rid}'s record of first accesses is inconsistent"
                ));
            }
        }
        match self.eviction {
            Eviction::Lru => self.lru_invariants(),
            Eviction::Arc => self.arc_invariants(),
        }
    }

    /// The lane of retired runs: under LRU only, its spans in order (each one's last entry before the
    /// next's head), none of their keys in a group or among the singles, `lane_len` its entries.
    fn lane_invariants(&self) -> std::result::Result<(), String> {
        let lane = &self.lane;
        if lane.iter().map(|s| s.len() as u64).sum::<u64>() != self.lane_len {
            return Err("the lane's count is not its spans' entries".into());
        }
        if lane.len() > 0 && self.eviction != Eviction::Lru {
            return Err("a lane of retired runs under ARC".into());
        }
        if lane
            .iter()
            .zip(lane.iter().skip(1))
            .any(|(a, b)| a.last_of(a.len()) >= b.head())
        {
            return Err("the lane of retired runs is out of order".into());
        }
        for s in lane.iter() {
            if let Some((_, key)) = s
                .entries(s.len())
                .find(|&(_, key)| self.chunks.contains(key))
            {
                return Err(format!("retired chunk {} is also held in a group", key.0));
            }
        }
        Ok(())
    }

    /// The own runs (`own.rs`): under LRU without a threshold only, each its request's one record (no
    /// `Rec`, no `Access` beside it) and its keys held nowhere else; once the order is live, each in the
    /// index (`Owns::check_index`).
    fn own_invariants(&self) -> std::result::Result<(), String> {
        self.owns.check()?;
        self.owns.check_index(self.heap_live)?;
        if self.owns.is_empty() {
            return Ok(());
        }
        if self.eviction != Eviction::Lru || self.threshold > 0 {
            return Err("an own run under ARC or a threshold".into());
        }
        for o in self.owns.iter() {
            if self.chunks.groups.get(o.hi).is_some()
                || self.chunks.recs.get(o.hi).is_some()
                || self.accesses.contains_key(&o.hi)
            {
                return Err(format!("request {}'s own run is not its only record", o.hi));
            }
            if (o.lo..o.lo + o.n).any(|p| self.chunks.contains(run_key(o.hi, u64::from(p)))) {
                return Err(format!("request {}'s own run's keys are held twice", o.hi));
            }
        }
        let his: HashSet<u64> = self.owns.iter().map(|o| o.hi).collect();
        if his.len() != self.owns.iter().count() {
            return Err("a request with two own runs".into());
        }
        Ok(())
    }

    fn lru_invariants(&self) -> std::result::Result<(), String> {
        if self.t1.len() + self.t2.len() + self.b1.len() + self.b2.len() > 0 || self.target != 0.0 {
            return Err("ARC state under LRU".into());
        }
        let log = &self.log;
        if log
            .windows(2)
            .any(|w| w[0].last_of(w[0].len()) > w[1].head())
        {
            return Err("the log of finishes' spans is out of order".into());
        }
        if !self.heap_live {
            return if self.heap.is_empty() {
                Ok(())
            } else {
                Err("the LRU heap holds entries before it is live".into())
            };
        }
        if !log.is_empty() {
            return Err("a log of finishes' spans beside a live heap".into());
        }
        let live: HashSet<(Rank, BlockKey)> = self.heap.iter().map(|e| e.0).collect();
        for (key, c) in self.chunks.iter() {
            if c.evictable() && !live.contains(&(c.rank(), key)) {
                return Err(format!(
                    "evictable chunk {} has no current heap entry",
                    key.0
                ));
            }
        }
        Ok(())
    }

    fn arc_invariants(&self) -> std::result::Result<(), String> {
        if self.heap_live || !self.heap.is_empty() || !self.log.is_empty() {
            return Err("LRU state under ARC".into());
        }
        for (list, name) in [
            (&self.t1, "T1"),
            (&self.t2, "T2"),
            (&self.b1, "B1"),
            (&self.b2, "B2"),
        ] {
            list.check(name)?;
        }
        if self.t1.len() + self.t2.len() != self.chunks.len()
            || self.t1.keys().any(|k| self.t2.contains(k))
            || self
                .chunks
                .keys()
                .any(|k| !self.t1.contains(k) && !self.t2.contains(k))
        {
            return Err("the chunks held are not T1 and T2, disjoint".into());
        }
        for (ghost, other, name) in [(&self.b1, &self.b2, "B1"), (&self.b2, &self.b1, "B2")] {
            if ghost.len() as u64 > self.capacity {
                return Err(format!(
                    "{name} holds {} ghosts, capacity {}",
                    ghost.len(),
                    self.capacity
                ));
            }
            if ghost
                .keys()
                .any(|k| other.contains(k) || self.chunks.contains(k))
            {
                return Err(format!("a ghost of {name} is held or in the other list"));
            }
        }
        if !(0.0..=self.capacity as f64).contains(&self.target) {
            return Err(format!(
                "target {} outside 0..={}",
                self.target, self.capacity
            ));
        }
        Ok(())
    }
}

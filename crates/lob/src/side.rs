//! One side of one book: its price levels indexed by integer tick.
//!
//! The poster's bucketed integer priority queue, in its simplest fast form: an array of
//! `window_ticks` level handles covering `[base_tick, base_tick + window_ticks)` plus an
//! occupancy bitmap over it, so finding a level by price is one index and finding the next
//! worse level is a scan of a few 64-bit words (`leading_zeros`/`trailing_zeros`). Levels
//! outside the window live in a `BTreeMap` (the fallback for far prices). The best level is
//! cached, so best bid/ask is O(1); it is recomputed only when the best level empties.
//!
//! The window is placed around the first level that arrives on an empty side, and re-placed
//! around the best level (pulling far levels in) whenever it empties while far levels remain.
//! A market that drifts more than half a window while old levels stay inside it keeps working,
//! but new levels near the touch then go to the map: slower and allocating (see the crate
//! docs). The handles are indices into the engine's level slab; the level itself stores its
//! tick, so this type never needs to read the slab.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::NIL;
use crate::types::Side;

pub(crate) struct BookSide {
    pub(crate) side: Side,
    base_tick: i64,
    slots: Box<[u32]>,
    bits: Box<[u64]>,
    window_count: u32,
    far: BTreeMap<i64, u32>,
    /// Handle of the best level, or [`NIL`] when the side is empty.
    pub(crate) best: u32,
    /// Tick of the best level (meaningless when `best == NIL`).
    pub(crate) best_tick: i64,
}

impl BookSide {
    pub(crate) fn new(side: Side, window_ticks: u32) -> Self {
        assert!(window_ticks.is_power_of_two() && window_ticks >= 64);
        let width = window_ticks as usize;
        Self {
            side,
            base_tick: 0,
            slots: vec![NIL; width].into_boxed_slice(),
            bits: vec![0; width / 64].into_boxed_slice(),
            window_count: 0,
            far: BTreeMap::new(),
            best: NIL,
            best_tick: 0,
        }
    }

    /// Is a level at tick `a` strictly better than one at tick `b` on this side?
    #[inline]
    pub(crate) fn better(&self, a: i64, b: i64) -> bool {
        match self.side {
            Side::Buy => a > b,
            Side::Sell => a < b,
        }
    }

    /// The level handle at `tick`, or [`NIL`].
    #[inline]
    pub(crate) fn find(&self, tick: i64) -> u32 {
        match self.offset(tick) {
            Some(off) => self.slots[off],
            None => self.far.get(&tick).copied().unwrap_or(NIL),
        }
    }

    /// Adds level `level` at `tick`, which must be free.
    pub(crate) fn insert(&mut self, tick: i64, level: u32) {
        debug_assert_eq!(self.find(tick), NIL);
        debug_assert!(level != NIL);
        if self.best == NIL {
            debug_assert!(self.window_count == 0 && self.far.is_empty());
            self.base_tick = tick - self.slots.len() as i64 / 2;
        }
        match self.offset(tick) {
            Some(off) => {
                self.slots[off] = level;
                self.bits[off / 64] |= 1 << (off % 64);
                self.window_count += 1;
            }
            None => {
                self.far.insert(tick, level);
            }
        }
        if self.best == NIL || self.better(tick, self.best_tick) {
            self.best = level;
            self.best_tick = tick;
        }
    }

    /// Removes the level at `tick`, which must be `level`; updates the best.
    pub(crate) fn remove(&mut self, tick: i64, level: u32) {
        match self.offset(tick) {
            Some(off) => {
                assert_eq!(
                    self.slots[off], level,
                    "side: removing a level not at its tick"
                );
                self.slots[off] = NIL;
                self.bits[off / 64] &= !(1 << (off % 64));
                self.window_count -= 1;
            }
            None => {
                let removed = self.far.remove(&tick);
                assert_eq!(
                    removed,
                    Some(level),
                    "side: removing a far level not at its tick"
                );
            }
        }
        if self.best == level {
            (self.best, self.best_tick) = self.next_worse(tick).unwrap_or((NIL, 0));
        }
        if self.window_count == 0 && !self.far.is_empty() {
            self.rebase();
        }
    }

    /// The best level strictly worse than `tick`, as (handle, tick).
    pub(crate) fn next_worse(&self, tick: i64) -> Option<(u32, i64)> {
        let width = self.slots.len() as i64;
        let rel = tick - self.base_tick;
        let (window, far) = match self.side {
            Side::Buy => {
                let limit = rel.clamp(0, width) as usize;
                let window = highest_below(&self.bits, limit);
                let far = self.far.range(..tick).next_back();
                (window, far)
            }
            Side::Sell => {
                let start = (rel + 1).clamp(0, width) as usize;
                let window = lowest_from(&self.bits, start);
                let far = self
                    .far
                    .range((Bound::Excluded(tick), Bound::Unbounded))
                    .next();
                (window, far)
            }
        };
        let window = window.map(|off| (self.slots[off], self.base_tick + off as i64));
        let far = far.map(|(&t, &l)| (l, t));
        match (window, far) {
            (Some(w), Some(f)) => Some(if self.better(w.1, f.1) { w } else { f }),
            (w, f) => w.or(f),
        }
    }

    /// Every level, best first, as (handle, tick). O(levels + window); for snapshots and checks.
    pub(crate) fn levels(&self) -> impl Iterator<Item = (u32, i64)> + '_ {
        let mut next = (self.best != NIL).then_some((self.best, self.best_tick));
        core::iter::from_fn(move || {
            let current = next?;
            next = self.next_worse(current.1);
            Some(current)
        })
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.len() * size_of::<u32>() + self.bits.len() * size_of::<u64>()
    }

    /// Checks window/bitmap/map agreement (O(window + far)); returns the level count.
    pub(crate) fn check_invariants(&self, tick_of: impl Fn(u32) -> i64) -> usize {
        let mut window_count = 0;
        for (off, &slot) in self.slots.iter().enumerate() {
            let bit = self.bits[off / 64] >> (off % 64) & 1 == 1;
            assert_eq!(bit, slot != NIL, "side: bitmap disagrees with slots");
            if slot != NIL {
                window_count += 1;
                assert_eq!(tick_of(slot), self.base_tick + off as i64);
            }
        }
        assert_eq!(window_count, self.window_count);
        for (&tick, &level) in &self.far {
            assert!(
                self.offset(tick).is_none(),
                "side: far level inside the window"
            );
            assert_eq!(tick_of(level), tick);
        }
        let count = window_count as usize + self.far.len();
        assert_eq!(count == 0, self.best == NIL);
        if self.best != NIL {
            assert_eq!(tick_of(self.best), self.best_tick);
            assert_eq!(self.find(self.best_tick), self.best);
            assert!(self.levels().all(|(_, t)| !self.better(t, self.best_tick)));
        }
        assert_eq!(self.levels().count(), count);
        count
    }

    #[inline]
    fn offset(&self, tick: i64) -> Option<usize> {
        let off = tick.wrapping_sub(self.base_tick);
        (0..self.slots.len() as i64)
            .contains(&off)
            .then_some(off as usize)
    }

    /// Centres the (empty) window on the best level and moves the far levels it covers in.
    fn rebase(&mut self) {
        debug_assert_eq!(self.window_count, 0);
        debug_assert!(self.best != NIL);
        let width = self.slots.len() as i64;
        self.base_tick = self.best_tick - width / 2;
        let end = self.base_tick + width;
        while let Some((&tick, &level)) = self.far.range(self.base_tick..end).next() {
            self.far.remove(&tick);
            let off = (tick - self.base_tick) as usize;
            self.slots[off] = level;
            self.bits[off / 64] |= 1 << (off % 64);
            self.window_count += 1;
        }
        debug_assert!(self.window_count > 0);
    }
}

/// The highest set bit with index `< limit`.
#[inline]
fn highest_below(bits: &[u64], limit: usize) -> Option<usize> {
    if limit == 0 {
        return None;
    }
    let last = limit - 1;
    let mut w = last / 64;
    let keep = last % 64;
    let mut word = bits[w] & (u64::MAX >> (63 - keep));
    loop {
        if word != 0 {
            return Some(w * 64 + 63 - word.leading_zeros() as usize);
        }
        if w == 0 {
            return None;
        }
        w -= 1;
        word = bits[w];
    }
}

/// The lowest set bit with index `>= start`.
#[inline]
fn lowest_from(bits: &[u64], start: usize) -> Option<usize> {
    let mut w = start / 64;
    if w >= bits.len() {
        return None;
    }
    let mut word = bits[w] & (u64::MAX << (start % 64));
    loop {
        if word != 0 {
            return Some(w * 64 + word.trailing_zeros() as usize);
        }
        w += 1;
        if w == bits.len() {
            return None;
        }
        word = bits[w];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: bit scans agree with a linear scan for every boundary. Method: exhaustive over
    /// sparse patterns in 128 bits.
    #[test]
    fn bit_scans_match_linear() {
        for seed in 0u64..200 {
            let bits = [
                seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) & 0x8000_0001_0010_0401,
                seed,
            ];
            let set = |i: usize| bits[i / 64] >> (i % 64) & 1 == 1;
            for k in 0..=128 {
                assert_eq!(highest_below(&bits, k), (0..k).rev().find(|&i| set(i)));
                assert_eq!(lowest_from(&bits, k), (k..128).find(|&i| set(i)));
            }
        }
    }

    /// Goal: levels far from the window land in the map and come back into the window when it
    /// empties. Method: insert near and far levels on a bid side, remove the near ones.
    #[test]
    fn far_levels_fallback_and_rebase() {
        let mut side = BookSide::new(Side::Buy, 64);
        side.insert(1000, 1);
        side.insert(10_000, 2); // far above: becomes best
        side.insert(-5, 3); // far below
        assert_eq!((side.best, side.best_tick), (2, 10_000));
        let order: Vec<_> = side.levels().collect();
        assert_eq!(order, vec![(2, 10_000), (1, 1000), (3, -5)]);
        side.remove(10_000, 2);
        assert_eq!((side.best, side.best_tick), (1, 1000));
        side.remove(1000, 1); // window empties: rebase around -5
        assert_eq!((side.best, side.best_tick), (3, -5));
        assert_eq!(
            side.check_invariants(|l| [0, 1000, 10_000, -5][l as usize]),
            1
        );
        assert!(side.far.is_empty());
    }
}

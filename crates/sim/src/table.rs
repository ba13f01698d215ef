//! A map from a directed host pair to per-pair state, for the network's links.
//!
//! With RRPS every proxy sends to every node of the next layer over a run, so the simulator
//! holds a link per (parent, node of the next layer) pair: ~10^5 at N = 1000 and ~10^7 at
//! N = 10,000. Every datagram copy looks its link up, and at N = 1000 the links (~14 MB) do
//! not fit in cache, so the layout is chosen for the access pattern: one handler's fan-out
//! sends to a few blocks of consecutive node ids (a layer's children are numbered in order).
//!
//! So each source has its own open-addressing table keyed by target with the identity as the
//! hash: consecutive targets sit in consecutive slots (one fan-out walks memory forwards, which
//! the hardware prefetcher follows), and a slot holds the target and the index of its value
//! side by side (one miss, not two). Values live densely per source in insertion order, and a
//! block's links are created by the same fan-out, so they sit together too. (A single global
//! table with a mixing hash, the layout before, scattered one fan-out's lookups over the whole
//! table: two dependent misses per copy.)
//!
//! The tables are never iterated, so their layout cannot leak into a run's results.

/// Per-pair state `V` keyed by `(source, target)`.
#[derive(Debug)]
pub(crate) struct PairTable<V> {
    sources: Vec<SourceTable<V>>,
    len: usize,
}

/// One source's links.
#[derive(Debug)]
struct SourceTable<V> {
    /// `(target, index of its value)` per slot, [`EMPTY`] targets where free; a power of two
    /// long, or empty before the first link.
    slots: Vec<(u32, u32)>,
    values: Vec<V>,
}

/// Marks a free slot. `u32::MAX` is refused as a target.
const EMPTY: u32 = u32::MAX;
/// Slots a source's table starts with.
const SLOTS_MIN: usize = 16;

impl<V> PairTable<V> {
    /// An empty table.
    pub(crate) fn new() -> Self {
        Self {
            sources: Vec::new(),
            len: 0,
        }
    }

    /// Pairs stored.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The value of `(source, target)`, if present.
    #[cfg(test)]
    pub(crate) fn get(&self, source: u32, target: u32) -> Option<&V> {
        let table = self.sources.get(source as usize)?;
        match table.find(target) {
            Some(Ok(slot)) => Some(&table.values[table.slots[slot].1 as usize]),
            _ => None,
        }
    }

    /// The value of `(source, target)`, made by `make` first if the pair is new.
    pub(crate) fn get_or_insert_with(
        &mut self,
        source: u32,
        target: u32,
        make: impl FnOnce() -> V,
    ) -> &mut V {
        assert_ne!(target, EMPTY, "u32::MAX is not a host");
        let source = source as usize;
        if source >= self.sources.len() {
            self.sources.resize_with(source + 1, SourceTable::new);
        }
        let table = &mut self.sources[source];
        let index = match table.find(target) {
            Some(Ok(slot)) => table.slots[slot].1 as usize,
            found => {
                self.len += 1;
                table.insert(found.and_then(Result::err), target, make())
            }
        };
        &mut table.values[index]
    }
}

impl<V> SourceTable<V> {
    fn new() -> Self {
        Self {
            slots: Vec::new(),
            values: Vec::new(),
        }
    }

    /// `Some(Ok(slot))` holding `target`, `Some(Err(slot))`: the free slot where it would go,
    /// `None` before the table has slots.
    fn find(&self, target: u32) -> Option<Result<usize, usize>> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut slot = target as usize & mask;
        loop {
            match self.slots[slot].0 {
                t if t == target => return Some(Ok(slot)),
                EMPTY => return Some(Err(slot)),
                _ => slot = (slot + 1) & mask,
            }
        }
    }

    fn insert(&mut self, free: Option<usize>, target: u32, value: V) -> usize {
        let index = self.values.len();
        let index32 = u32::try_from(index).expect("fewer than 2^32 links per source");
        self.values.push(value);
        // Keep the load at most one half, so probe runs stay short.
        let slot = match free {
            Some(slot) if self.values.len() * 2 <= self.slots.len() => slot,
            _ => {
                self.grow();
                let Some(Err(slot)) = self.find(target) else {
                    unreachable!("a new target has no slot");
                };
                slot
            }
        };
        self.slots[slot] = (target, index32);
        index
    }

    /// Doubles the slots (or makes the first ones) and re-places every placed target.
    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(SLOTS_MIN);
        let old = core::mem::replace(&mut self.slots, vec![(EMPTY, 0); size]);
        for (target, index) in old.into_iter().filter(|&(t, _)| t != EMPTY) {
            let Some(Err(slot)) = self.find(target) else {
                unreachable!("targets are unique");
            };
            self.slots[slot] = (target, index);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::rng::SimRng;

    /// Goal: the table behaves as a map through many growths. Method: random pairs (with
    /// repeats) against a `BTreeMap` model, then every pair read back.
    #[test]
    fn behaves_like_a_map() {
        let mut rng = SimRng::from_seed(3);
        let mut table = PairTable::new();
        let mut model = BTreeMap::new();
        for i in 0..50_000u64 {
            let source = rng.below(300) as u32;
            let target = rng.below(3_000) as u32;
            let made = table.get_or_insert_with(source, target, || i);
            let expected = *model.entry((source, target)).or_insert(i);
            assert_eq!(*made, expected);
        }
        assert_eq!(table.len(), model.len());
        for (&(source, target), &value) in &model {
            assert_eq!(table.get(source, target), Some(&value));
        }
        assert_eq!(table.get(300, 0), None);
        for source in &table.sources {
            assert!(source.slots.len() >= 2 * source.values.len());
        }
        *table.get_or_insert_with(0, 0, || 7) = 99;
        assert_eq!(table.get(0, 0), Some(&99));
    }
}

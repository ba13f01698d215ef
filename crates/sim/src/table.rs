//! A map from a directed host pair to per-pair state, for the network's links.
//!
//! With RRPS every proxy sends to every node of the next layer over a run, so the simulator
//! holds a link per (parent, node of the next layer) pair: ~10^5 at N = 1000 and ~10^7 at
//! N = 10,000. Every datagram copy looks its link up. A `BTreeMap` paid a chain of dependent
//! cache misses per lookup and ~2 words of node overhead per entry; this table is open
//! addressing with linear probing over a flat array of keys (one probe, usually one miss),
//! and the values live densely in insertion order in a `Vec`.
//!
//! The table is never iterated, so its layout cannot leak into a run's results; lookups are
//! a pure function of the key, which keeps the simulator deterministic without a seeded
//! hasher.

/// Per-pair state `V` keyed by `(source, target)`.
#[derive(Debug)]
pub(crate) struct PairTable<V> {
    /// Packed keys (`source << 32 | target`), [`EMPTY`] where free; a power of two long.
    keys: Vec<u64>,
    /// For each occupied key slot, the index of its value.
    slots: Vec<u32>,
    values: Vec<V>,
}

/// Marks a free key slot. `(u32::MAX, u32::MAX)` is refused as a key.
const EMPTY: u64 = u64::MAX;
/// Key slots a table starts with.
const SLOTS_MIN: usize = 64;

impl<V> PairTable<V> {
    /// An empty table.
    pub(crate) fn new() -> Self {
        Self {
            keys: vec![EMPTY; SLOTS_MIN],
            slots: vec![0; SLOTS_MIN],
            values: Vec::new(),
        }
    }

    /// Pairs stored.
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }

    /// The value of `(source, target)`, if present.
    #[cfg(test)]
    pub(crate) fn get(&self, source: u32, target: u32) -> Option<&V> {
        let key = pack(source, target);
        match self.find(key) {
            Ok(slot) => Some(&self.values[self.slots[slot] as usize]),
            Err(_) => None,
        }
    }

    /// The value of `(source, target)`, made by `make` first if the pair is new.
    pub(crate) fn get_or_insert_with(
        &mut self,
        source: u32,
        target: u32,
        make: impl FnOnce() -> V,
    ) -> &mut V {
        let key = pack(source, target);
        let index = match self.find(key) {
            Ok(slot) => self.slots[slot] as usize,
            Err(slot) => self.insert_at(slot, key, make()),
        };
        &mut self.values[index]
    }

    /// `Ok(slot)` holding `key`, or `Err(slot)`: the free slot where it would go.
    fn find(&self, key: u64) -> Result<usize, usize> {
        let mask = self.keys.len() - 1;
        let mut slot = hash(key, mask);
        loop {
            match self.keys[slot] {
                k if k == key => return Ok(slot),
                EMPTY => return Err(slot),
                _ => slot = (slot + 1) & mask,
            }
        }
    }

    fn insert_at(&mut self, slot: usize, key: u64, value: V) -> usize {
        let index = self.values.len();
        let index32 = u32::try_from(index).expect("fewer than 2^32 pairs");
        self.values.push(value);
        self.keys[slot] = key;
        self.slots[slot] = index32;
        // Keep the load at most one half, so probe runs stay short.
        if self.values.len() * 2 > self.keys.len() {
            self.grow();
        }
        debug_assert_eq!(self.find(key).map(|s| self.slots[s]), Ok(index32));
        index
    }

    fn grow(&mut self) {
        let size = self.keys.len() * 2;
        let keys = core::mem::replace(&mut self.keys, vec![EMPTY; size]);
        let slots = core::mem::replace(&mut self.slots, vec![0; size]);
        let mut moved = 0;
        for (key, index) in keys.into_iter().zip(slots).filter(|&(k, _)| k != EMPTY) {
            let Err(slot) = self.find(key) else {
                unreachable!("keys are unique");
            };
            self.keys[slot] = key;
            self.slots[slot] = index;
            moved += 1;
        }
        assert_eq!(moved, self.values.len());
    }
}

fn pack(source: u32, target: u32) -> u64 {
    let key = u64::from(source) << 32 | u64::from(target);
    assert_ne!(key, EMPTY, "(u32::MAX, u32::MAX) is not a host pair");
    key
}

/// The home slot of `key`: the top bits of a multiplicative mix (neighbouring targets of one
/// source land far apart, so a fan-out's lookups do not pile onto one probe run).
fn hash(key: u64, mask: usize) -> usize {
    let mixed = (key ^ (key >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let bits = mask.count_ones();
    if bits == 0 {
        return 0;
    }
    (mixed >> (64 - bits)) as usize & mask
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
        assert!(table.keys.len() >= 2 * table.len());
        *table.get_or_insert_with(0, 0, || 7) = 99;
        assert_eq!(table.get(0, 0), Some(&99));
    }
}

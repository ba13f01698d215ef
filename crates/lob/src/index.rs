//! Order id → order slot: an open-addressing hash table sized once.
//!
//! Linear probing with backward-shift deletion (no tombstones, so probe lengths do not decay
//! under churn). Each entry is 8 bytes: the order's slot and a 32-bit tag from the id's hash,
//! so a probe only touches the order slab when the tag matches. The table has at least twice
//! as many entries as `orders_max`, so the load factor never exceeds 1/2. The hash is a fixed
//! function (splitmix64's finaliser): iteration order is never used and results do not depend
//! on it, so determinism holds; an adversary choosing ids could lengthen probes, but ids are
//! chosen by the exchange.

use crate::NIL;

const EMPTY: u64 = u64::MAX;

pub(crate) struct OrderIndex {
    entries: Box<[u64]>,
    mask: usize,
}

impl OrderIndex {
    pub(crate) fn new(orders_max: u32) -> Self {
        let len = (orders_max as usize * 2).next_power_of_two().max(2);
        Self {
            entries: vec![EMPTY; len].into_boxed_slice(),
            mask: len - 1,
        }
    }

    /// The slot of the order with `id`, or [`NIL`]. `id_of` reads a slot's id.
    #[inline]
    pub(crate) fn find(&self, id: u64, id_of: impl Fn(u32) -> u64) -> u32 {
        let hash = mix(id);
        let tag = (hash >> 32) as u32;
        let mut i = hash as usize & self.mask;
        loop {
            let entry = self.entries[i];
            if entry == EMPTY {
                return NIL;
            }
            let slot = entry as u32;
            if (entry >> 32) as u32 == tag && id_of(slot) == id {
                return slot;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Inserts `id` → `slot`; the caller has checked that `id` is absent.
    #[inline]
    pub(crate) fn insert(&mut self, id: u64, slot: u32) {
        debug_assert!(slot != NIL);
        let hash = mix(id);
        let mut i = hash as usize & self.mask;
        while self.entries[i] != EMPTY {
            debug_assert!(self.entries[i] as u32 != slot);
            i = (i + 1) & self.mask;
        }
        self.entries[i] = (hash >> 32 << 32) | u64::from(slot);
    }

    /// Removes `id` → `slot`, which must be present. `id_of` must still answer for `slot`.
    pub(crate) fn remove(&mut self, id: u64, slot: u32, id_of: impl Fn(u32) -> u64) {
        let mut i = mix(id) as usize & self.mask;
        while self.entries[i] as u32 != slot {
            assert!(self.entries[i] != EMPTY, "index: removing an absent order");
            i = (i + 1) & self.mask;
        }
        // Backward shift: pull later entries of the cluster into the hole unless their home
        // lies cyclically in (hole, j].
        let mut j = i;
        loop {
            j = (j + 1) & self.mask;
            let entry = self.entries[j];
            if entry == EMPTY {
                break;
            }
            let home = mix(id_of(entry as u32)) as usize & self.mask;
            let stays = if i <= j {
                i < home && home <= j
            } else {
                i < home || home <= j
            };
            if !stays {
                self.entries[i] = entry;
                i = j;
            }
        }
        self.entries[i] = EMPTY;
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.entries.len() * size_of::<u64>()
    }

    /// Number of occupied entries (O(capacity); for invariant checks).
    pub(crate) fn len(&self) -> usize {
        self.entries.iter().filter(|&&e| e != EMPTY).count()
    }
}

/// splitmix64's finaliser: a fixed, well-mixing 64-bit hash.
#[inline]
fn mix(id: u64) -> u64 {
    let mut z = id.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the table agrees with a model map under heavy insert/remove churn in a tiny table
    /// (long clusters, wrap-around). Method: a deterministic LCG picks ids from a small range.
    #[test]
    fn churn_matches_model() {
        let mut ids = vec![u64::MAX; 64]; // slot -> id, u64::MAX = free
        let mut index = OrderIndex::new(32);
        let mut x: u64 = 12345;
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let id = (x >> 33) % 80;
            let found = index.find(id, |s| ids[s as usize]);
            let model = ids.iter().position(|&i| i == id);
            assert_eq!(found, model.map_or(NIL, |p| p as u32));
            match model {
                Some(slot) => {
                    index.remove(id, slot as u32, |s| ids[s as usize]);
                    ids[slot] = u64::MAX;
                }
                None => {
                    if let Some(slot) = ids.iter().take(32).position(|&i| i == u64::MAX) {
                        ids[slot] = id;
                        index.insert(id, slot as u32);
                    }
                }
            }
            assert_eq!(index.len(), ids.iter().filter(|&&i| i != u64::MAX).count());
        }
    }
}

//! First-copy-wins dedupe over a dense sequence number (DESIGN.md §4 "Dedupe window").
//!
//! Hedging delivers `H + 1` copies of every packet on purpose; the first one wins and the rest
//! are dropped here. The window is a bitmap ring over the last `size` sequence numbers: a bit
//! per number, cleared as the highest number seen moves forward. A number more than `size`
//! below the highest cannot be told from a duplicate and is dropped as too old.
//!
//! A number a whole window or more *ahead* of the highest would clear the ring, and every
//! number of the real stream after it would read as too old: one corrupt or forged packet
//! from a parent's address would silence the node for good. A real stream moves that far
//! only after a silence (every packet goes to every node; a node that hears the stream
//! hears its numbers one by one), so [`DedupeWindow::far_ahead`] calls such a number
//! implausible unless nothing new came for a while, or the next number beyond confirms it
//! (a paused node that resumes works through what its socket kept, then meets the stream
//! far ahead: it loses one packet to the check, not a `quiet` of them).

use core::time::Duration;

use crate::time::Instant;

/// What the window says about a sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// First copy: process it.
    New,
    /// Already seen.
    Duplicate,
    /// Older than the window.
    TooOld,
}

/// A bitmap ring over recent sequence numbers.
#[derive(Clone, Debug)]
pub struct DedupeWindow {
    words: Vec<u64>,
    /// The highest sequence number seen, if any.
    highest: Option<u64>,
    /// When the last new number came ([`DedupeWindow::insert_at`]).
    last_new: Option<Instant>,
    /// The last number called far ahead, for the next one to confirm.
    far: Option<u64>,
}

impl DedupeWindow {
    /// Smallest window, in sequence numbers.
    pub const SIZE_MIN: u64 = 64;

    /// A window over `size` sequence numbers, rounded up to a power of two (at least 64).
    /// Choose it at least the packet rate times the longest reorder horizon.
    pub fn new(size: u64) -> Self {
        let size = size.max(Self::SIZE_MIN).next_power_of_two();
        Self {
            words: vec![0; (size / 64) as usize],
            highest: None,
            last_new: None,
            far: None,
        }
    }

    /// The window's size in sequence numbers.
    pub fn size(&self) -> u64 {
        self.words.len() as u64 * 64
    }

    /// The highest sequence number seen.
    pub fn highest(&self) -> Option<u64> {
        self.highest
    }

    /// Records `seq` and says whether it is new.
    pub fn insert(&mut self, seq: u64) -> Verdict {
        let size = self.size();
        match self.highest {
            None => self.highest = Some(seq),
            Some(highest) if seq > highest => {
                if seq - highest >= size {
                    self.words.fill(0);
                } else {
                    for s in highest + 1..=seq {
                        self.clear(s);
                    }
                }
                self.highest = Some(seq);
            }
            Some(highest) => {
                if highest - seq >= size {
                    return Verdict::TooOld;
                }
                if self.test(seq) {
                    return Verdict::Duplicate;
                }
            }
        }
        self.set(seq);
        debug_assert!(self.test(seq));
        Verdict::New
    }

    /// Whether no new number came within `quiet` of `now`, or none ever did: the stream this
    /// window follows has gone silent.
    pub fn silent_for(&self, now: Instant, quiet: Duration) -> bool {
        self.last_new
            .is_none_or(|last| now.saturating_duration_since(last) >= quiet)
    }

    /// [`DedupeWindow::insert`] at `now`, remembered for [`DedupeWindow::far_ahead`].
    pub fn insert_at(&mut self, seq: u64, now: Instant) -> Verdict {
        let verdict = self.insert(seq);
        if verdict == Verdict::New {
            self.last_new = Some(now);
        }
        verdict
    }

    /// Whether `seq` lies `reach` or more ahead of the highest number seen (a whole window at
    /// most) while new numbers came within `quiet` of `now`: taken, it would make the
    /// stream's next real numbers too old, here or in what the caller keeps `reach` numbers
    /// of (a gateway's hold, a proxy's repair ring). After `quiet` without a new number, the
    /// stream may have moved on while this node heard none of it (a dead parent;
    /// `parent_timeout`), and any number is plausible. So is one that follows the last
    /// number called far ahead by less than `reach`: two numbers agree that the stream is
    /// there (one corrupt or forged number has no such follower).
    pub fn far_ahead(&mut self, seq: u64, now: Instant, quiet: Duration, reach: u64) -> bool {
        let (Some(highest), Some(last_new)) = (self.highest, self.last_new) else {
            return false;
        };
        let reach = reach.min(self.size());
        let far = seq > highest
            && seq - highest >= reach
            && now.saturating_duration_since(last_new) < quiet;
        if !far {
            return false;
        }
        if self
            .far
            .is_some_and(|last| seq > last && seq - last < reach)
        {
            self.far = None;
            return false;
        }
        self.far = Some(seq);
        true
    }

    /// Whether `seq` was seen (false for numbers outside the window).
    pub fn contains(&self, seq: u64) -> bool {
        match self.highest {
            Some(highest) => seq <= highest && highest - seq < self.size() && self.test(seq),
            None => false,
        }
    }

    fn slot(&self, seq: u64) -> (usize, u64) {
        let bit = seq & (self.size() - 1);
        ((bit / 64) as usize, 1u64 << (bit % 64))
    }

    fn test(&self, seq: u64) -> bool {
        let (word, mask) = self.slot(seq);
        self.words[word] & mask != 0
    }

    fn set(&mut self, seq: u64) {
        let (word, mask) = self.slot(seq);
        self.words[word] |= mask;
    }

    fn clear(&mut self, seq: u64) {
        let (word, mask) = self.slot(seq);
        self.words[word] &= !mask;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn first_copy_wins() {
        let mut w = DedupeWindow::new(100);
        assert_eq!(w.size(), 128);
        assert_eq!(w.insert(5), Verdict::New);
        assert_eq!(w.insert(5), Verdict::Duplicate);
        assert_eq!(w.insert(3), Verdict::New);
        assert_eq!(w.insert(3), Verdict::Duplicate);
        assert_eq!(w.insert(200), Verdict::New);
        assert_eq!(
            w.insert(73),
            Verdict::New,
            "just inside the window: 200 - 127"
        );
        assert_eq!(w.insert(73), Verdict::Duplicate);
        assert_eq!(w.insert(72), Verdict::TooOld);
        assert_eq!(w.insert(5), Verdict::TooOld);
        assert_eq!(w.insert(1_000_000), Verdict::New, "a jump clears the ring");
        assert!(!w.contains(200));
    }

    /// Goal: a number a window or more ahead of the highest is implausible while the stream
    /// flows, and plausible after it was quiet (a real stream that moved on meanwhile).
    #[test]
    fn a_jump_of_a_window_is_far_ahead_unless_the_stream_was_quiet() {
        let quiet = Duration::from_millis(100);
        let at = |ms| Instant::ZERO + Duration::from_millis(ms);
        let mut w = DedupeWindow::new(128);
        let far = |w: &mut DedupeWindow, seq, ms| w.far_ahead(seq, at(ms), quiet, u64::MAX);
        assert!(!far(&mut w, 1 << 62, 0), "nothing seen yet");
        assert_eq!(w.insert_at(10, at(1)), Verdict::New);
        assert!(!far(&mut w, 137, 2), "within the window");
        assert!(far(&mut w, 138, 2), "a window ahead");
        assert!(far(&mut w, 1 << 62, 100));
        assert!(!far(&mut w, 1 << 62, 101), "quiet for 100 ms");
        assert_eq!(w.insert_at(10, at(50)), Verdict::Duplicate);
        assert!(!far(&mut w, 1 << 62, 101), "a duplicate is nothing new");
        assert!(!far(&mut w, 5, 2), "behind is not ahead");
        assert!(!w.far_ahead(41, at(2), quiet, 32), "within the reach");
        assert!(w.far_ahead(42, at(2), quiet, 32), "the reach ahead");
        assert!(
            !w.far_ahead(43, at(2), quiet, 32),
            "confirmed by the next one beyond"
        );
        assert!(w.far_ahead(1_000, at(2), quiet, 32), "a new far number");
        assert!(
            w.far_ahead(999, at(2), quiet, 32),
            "one behind it confirms nothing"
        );
    }

    proptest! {
        /// Goal: the window agrees with an exact set for every number inside the window.
        #[test]
        fn agrees_with_a_set(seqs in proptest::collection::vec(0u64..600, 1..400)) {
            let mut w = DedupeWindow::new(128);
            let mut seen = std::collections::BTreeSet::new();
            let mut highest = 0;
            for (i, &s) in seqs.iter().enumerate() {
                let verdict = w.insert(s);
                if i > 0 && s + 128 <= highest {
                    prop_assert_eq!(verdict, Verdict::TooOld);
                } else if seen.contains(&s) {
                    prop_assert_eq!(verdict, Verdict::Duplicate);
                } else {
                    prop_assert_eq!(verdict, Verdict::New);
                }
                if verdict != Verdict::TooOld {
                    seen.insert(s);
                }
                highest = highest.max(s);
            }
        }
    }
}

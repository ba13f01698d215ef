//! Receiver hedging at a gateway: the answers its twin's lead leaves for it.
//!
//! Twins (two gateways of one participant, DESIGN.md §4 "Receiver hedging") run the same
//! strategy and send the same orders under the same client order ids; the root takes the first
//! copy of each and sends every response to both. A twin that runs behind its sibling (it
//! started later, its loop is busier, its wake-ups come later) therefore hears the answers to
//! orders it has not sent yet. Delivered then, they named orders its strategy had not asked
//! for, and when it did ask, its copy went up only to be dropped at the root as a duplicate:
//! no answer came again, and every order of the twin behind was given up on, unanswered
//! (found with `jasper node --all --receiver-hedging --orders 300`: ~2,400 orders of one twin
//! of each pair in 8 s).
//!
//! `EarlyAnswers` keeps such answers, by client order id, until the gateway's own strategy
//! asks for that order: the order then does not go up (the root has it), and the strategy
//! hears the answers at once, as if they had come back from its own copy.

use std::collections::BTreeMap;
use std::time::Duration;

use wire::order::Repr as OrderMsg;

use crate::time::Instant;

/// Client order ids a gateway keeps early answers for, at most (the oldest go first).
pub const EARLY_IDS_MAX: usize = 1 << 14;

/// How long a gateway keeps an early answer for its strategy to ask for the order: a twin
/// behind by more than this (or one whose strategy took another course and never asks for
/// that id) leaves the answers unclaimed, counted.
pub const EARLY_KEEP: Duration = Duration::from_secs(10);

/// Answers to orders this gateway has not sent yet, by client order id.
#[derive(Debug, Default)]
pub(crate) struct EarlyAnswers {
    by_id: BTreeMap<u64, Early>,
}

#[derive(Debug)]
struct Early {
    /// When its first answer came.
    since: Instant,
    answers: Vec<OrderMsg>,
}

impl EarlyAnswers {
    /// Keeps `answer` to order `id`, which came at `now`; returns the answers dropped to make
    /// room or for age (unclaimed).
    pub(crate) fn keep(&mut self, now: Instant, id: u64, answer: OrderMsg) -> u64 {
        let mut dropped = self.expire(now);
        if !self.by_id.contains_key(&id)
            && self.by_id.len() == EARLY_IDS_MAX
            && let Some((_, oldest)) = self.by_id.pop_first()
        {
            dropped += oldest.answers.len() as u64;
        }
        self.by_id
            .entry(id)
            .or_insert_with(|| Early {
                since: now,
                answers: Vec::new(),
            })
            .answers
            .push(answer);
        dropped
    }

    /// The answers kept for order `id`, in the order they came (none: it was not answered
    /// early, or they were dropped).
    pub(crate) fn take(&mut self, id: u64) -> Option<Vec<OrderMsg>> {
        self.by_id.remove(&id).map(|early| early.answers)
    }

    /// Drops the answers kept longer than [`EARLY_KEEP`]; returns how many.
    pub(crate) fn expire(&mut self, now: Instant) -> u64 {
        let mut dropped = 0;
        // Ids rise with time at the twin that sent them, and so do their first answers.
        while let Some(first) = self.by_id.first_entry() {
            if now.saturating_duration_since(first.get().since) <= EARLY_KEEP {
                break;
            }
            dropped += first.remove().answers.len() as u64;
        }
        dropped
    }

    /// Drops every answer kept; returns how many.
    pub(crate) fn clear(&mut self) -> u64 {
        let dropped = self.by_id.values().map(|e| e.answers.len() as u64).sum();
        self.by_id.clear();
        dropped
    }

    /// Ids with answers kept.
    pub(crate) fn len(&self) -> usize {
        self.by_id.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::ExchangeTime;
    use wire::order::{OrderHeader, RejectReason, Rejected};

    fn accepted(id: u64) -> OrderMsg {
        let header = OrderHeader {
            client_order_id: id,
            participant_id: 3,
            gateway_id: 7,
            time: ExchangeTime::from_nanos(id),
        };
        OrderMsg::Rejected(Rejected {
            header,
            reason: RejectReason::Closed,
        })
    }

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    /// Goal: answers come out by id, in their order, once; old ones and the oldest past the
    /// bound are dropped and counted.
    #[test]
    fn keeps_answers_until_asked_for_and_counts_the_unclaimed() {
        let mut early = EarlyAnswers::default();
        assert_eq!(early.keep(at(0), 5, accepted(5)), 0);
        assert_eq!(early.keep(at(1), 5, accepted(5)), 0);
        assert_eq!(early.keep(at(2), 6, accepted(6)), 0);
        assert_eq!(early.take(5).map(|a| a.len()), Some(2));
        assert_eq!(early.take(5), None, "once");
        assert_eq!(early.len(), 1);
        let late = at(2) + EARLY_KEEP + Duration::from_millis(1);
        assert_eq!(early.keep(late, 9, accepted(9)), 1, "id 6 unclaimed");
        assert_eq!(early.take(6), None);
        for id in 10..10 + EARLY_IDS_MAX as u64 - 1 {
            assert_eq!(early.keep(late, id, accepted(id)), 0);
        }
        assert_eq!(early.len(), EARLY_IDS_MAX);
        assert_eq!(
            early.keep(late, 1 << 40, accepted(1 << 40)),
            1,
            "id 9 made room"
        );
        assert_eq!(early.len(), EARLY_IDS_MAX);
        assert_eq!(early.take(9), None);
    }
}

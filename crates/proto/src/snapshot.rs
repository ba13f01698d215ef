//! Book snapshots: how a gateway that joined the stream after its start, or had to skip
//! packets the root's rewinder no longer held, gets the book (GLIMPSE's job, over UDP; the
//! packets are [`wire::market`]'s "Book snapshots").
//!
//! Without one, a participant that starts after the market opened, or whose gateway was cut
//! off longer than the rewinder reaches, rebuilds a book that lacks every order added before
//! its join point or in the skipped packets, and the later messages that name those orders do
//! not even apply.
//!
//! - The gateway asks the root ([`wire::control::Repr::SnapshotRequest`]) for a snapshot that
//!   covers at least the live packets before its join point (or the end of the skipped gap),
//!   and releases nothing meanwhile: packets are held as usual, and gaps asked for.
//! - The root takes a snapshot (`Taken`): its book as one Add Order per resting order, in
//!   price-time priority, packed into parts that say where the live stream goes on (the
//!   first live packet and MoldUDP64 sequence they do not cover). It keeps it while the
//!   rewinder still holds that packet (so every asker can still get the stream from there)
//!   and answers [`PARTS_PER_ANSWER`] parts a request, from the part asked for. It takes a
//!   new one at most once per [`TAKE_INTERVAL_MIN`].
//! - The gateway collects the parts (`Assembly`); a part of a newer snapshot starts it
//!   over. It asks for the next parts as soon as the last of an answer comes, and again from
//!   its first missing part after `gap_retry` (doubling, as for gaps). Whole, the parts go to
//!   the participant in order, as market data flagged [`wire::market::SNAPSHOT`] (a
//!   [`crate::book::BookBuilder`] starts over at part 0); the held packets they cover are
//!   dropped, and the stream goes on from the first one they do not.
//!
//! With a journal, a snapshot's parts leave the root after every packet it covers has
//! (they are held behind them until their records are durable): a snapshot never shows an
//! order a crash could still lose.

use wire::itch::Message as Itch;
use wire::market::{ITCH_BYTES_MAX, JasperHeader};
use wire::mold::{self, BLOCK_HEADER_LEN, Session};
use wire::{ExchangeTime, MarketDataBuilder};

/// Parts the root sends in answer to one request: the gateway asks for the next ones when
/// the last of them has come (a whole book does not go out in one burst that would overflow
/// the gateway's receive buffer).
pub const PARTS_PER_ANSWER: usize = 32;

/// The root takes a new snapshot at most once per this long: it costs a pass over the whole
/// book, and a gateway (or a hostile one) asking for ever newer ones would have the root do
/// little else. A request the kept snapshot cannot answer meanwhile is dropped and counted;
/// the gateway asks again after `gap_retry`.
pub const TAKE_INTERVAL_MIN: core::time::Duration = core::time::Duration::from_millis(5);

/// Bytes an Add Order takes in a part, with its length prefix.
const ADD_ORDER_BYTES: usize = 36 + BLOCK_HEADER_LEN;

/// The most parts a snapshot of a book of at most `orders_max` orders has: a gateway drops a
/// part claiming more (it would allocate for them).
pub(crate) fn parts_max(orders_max: u32) -> usize {
    (orders_max as usize).div_ceil(ITCH_BYTES_MAX / ADD_ORDER_BYTES) + 1
}

/// A snapshot the root took, kept for the gateways asking for its parts.
#[derive(Debug)]
pub(crate) struct Taken {
    /// The first live packet it does not cover.
    pub(crate) packet_seq: u64,
    parts: Vec<Vec<u8>>,
}

impl Taken {
    /// The parts of the book `messages` (Add Orders), taken at `send_time`, covering the live
    /// stream before packet `packet_seq`, MoldUDP64 message `sequence`. An empty book is one
    /// part without messages.
    pub(crate) fn new(
        session: Session,
        sequence: u64,
        packet_seq: u64,
        send_time: ExchangeTime,
        messages: &[Itch],
    ) -> Self {
        // Split greedily by the bytes a part takes (each message with its length prefix).
        let mut bounds = vec![0];
        let mut bytes = 0;
        for (i, message) in messages.iter().enumerate() {
            let len = message.buffer_len() + BLOCK_HEADER_LEN;
            if bytes + len > ITCH_BYTES_MAX {
                bounds.push(i);
                bytes = 0;
            }
            bytes += len;
        }
        bounds.push(messages.len());
        let count = bounds.len() - 1;
        let parts = bounds
            .windows(2)
            .enumerate()
            .map(|(i, w)| {
                let mut buf = vec![0; mold::PAYLOAD_MAX];
                let mut builder = MarketDataBuilder::new(&mut buf, session, sequence);
                for message in &messages[w[0]..w[1]] {
                    builder.push(message).expect("parts are split to fit");
                }
                let header = JasperHeader::snapshot(packet_seq, send_time, i as u32, count as u32);
                let len = builder
                    .finish(&header)
                    .expect("the header slot was reserved");
                buf.truncate(len);
                buf
            })
            .collect();
        Self { packet_seq, parts }
    }

    /// Parts in it.
    #[cfg(test)]
    pub(crate) fn parts(&self) -> usize {
        self.parts.len()
    }

    /// The parts answering a request for part `part` of a snapshot covering the packets
    /// before `packet_seq`: from `part` if this is the snapshot asked for, else (a newer one,
    /// or a part it does not have) from its first; at most [`PARTS_PER_ANSWER`].
    pub(crate) fn answer(&self, packet_seq: u64, part: u32) -> &[Vec<u8>] {
        let part = part as usize;
        let first = if packet_seq == self.packet_seq && part < self.parts.len() {
            part
        } else {
            0
        };
        let end = (first + PARTS_PER_ANSWER).min(self.parts.len());
        &self.parts[first..end]
    }
}

/// What [`Assembly::insert`] made of a part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Insert {
    /// Of a snapshot older than the one wanted: dropped.
    Stale,
    /// Already held: dropped.
    Duplicate,
    /// Kept; `ask` when it ends an answer and parts are still missing (ask for them now).
    Kept { ask: bool },
    /// The last part missing: the snapshot is whole.
    Whole,
}

/// A gateway's snapshot in the making.
#[derive(Debug)]
pub(crate) struct Assembly {
    /// The snapshot must cover the live packets before this one.
    covers: u64,
    /// The first live packet the parts held do not cover (0: none held).
    packet_seq: u64,
    parts: Vec<Option<Vec<u8>>>,
    parts_max: usize,
    /// Requests since the last progress.
    pub(crate) attempts: u32,
}

impl Assembly {
    /// Waits for a snapshot covering the packets before `covers`, of at most `parts_max`
    /// parts ([`parts_max`]).
    pub(crate) fn new(covers: u64, parts_max: usize) -> Self {
        Self {
            covers,
            parts_max,
            packet_seq: 0,
            parts: Vec::new(),
            attempts: 0,
        }
    }

    /// The snapshot must now also cover the packets before `covers` (a later skip): parts of
    /// one that does not are dropped.
    pub(crate) fn cover(&mut self, covers: u64) {
        self.covers = self.covers.max(covers);
        if self.packet_seq < self.covers {
            self.packet_seq = 0;
            self.parts.clear();
        }
    }

    /// What to ask for: (the snapshot's `packet_seq`, or the least it must cover while none
    /// is held; the first part missing).
    pub(crate) fn request(&self) -> (u64, u32) {
        let missing = self.parts.iter().position(Option::is_none).unwrap_or(0);
        (self.packet_seq.max(self.covers), missing as u32)
    }

    /// Takes a part (its header already parsed as one, [`JasperHeader::snapshot_part`]).
    pub(crate) fn insert(&mut self, header: &JasperHeader, bytes: &[u8]) -> Insert {
        let Some((part, parts)) = header.snapshot_part() else {
            return Insert::Stale;
        };
        if header.packet_seq < self.covers.max(self.packet_seq) || parts as usize > self.parts_max {
            return Insert::Stale;
        }
        if header.packet_seq > self.packet_seq || self.parts.len() != parts as usize {
            // A newer snapshot (or the first part of one): start over.
            self.packet_seq = header.packet_seq;
            self.parts.clear();
            self.parts.resize(parts as usize, None);
        }
        let slot = &mut self.parts[part as usize];
        if slot.is_some() {
            return Insert::Duplicate;
        }
        *slot = Some(bytes.to_vec());
        self.attempts = 0;
        if self.parts.iter().all(Option::is_some) {
            return Insert::Whole;
        }
        let ends_answer = (part as usize + 1).is_multiple_of(PARTS_PER_ANSWER) || part + 1 == parts;
        Insert::Kept { ask: ends_answer }
    }

    /// The first live packet the snapshot does not cover.
    pub(crate) fn packet_seq(&self) -> u64 {
        self.packet_seq
    }

    /// The parts, in order, once [`Insert::Whole`].
    pub(crate) fn into_parts(self) -> Vec<Vec<u8>> {
        self.parts.into_iter().flatten().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::book::BookBuilder;
    use wire::Side;
    use wire::Stock;
    use wire::itch::AddOrder;

    fn adds(n: u64) -> Vec<Itch> {
        (1..=n)
            .map(|i| {
                Itch::AddOrder(AddOrder {
                    stock_locate: (i % 3) as u16,
                    tracking_number: 0,
                    timestamp_ns: 0,
                    order_ref: i,
                    side: if i % 2 == 0 { Side::Buy } else { Side::Sell },
                    shares: 100 + i as u32,
                    stock: Stock::new("X").unwrap(),
                    price: 10_000 + (i % 7) as u32 * 100,
                })
            })
            .collect()
    }

    fn session() -> Session {
        Session::new("JASPER0001").unwrap()
    }

    #[test]
    fn the_parts_rebuild_the_book_they_were_taken_from() {
        let messages = adds(2000);
        let taken = Taken::new(session(), 5000, 77, ExchangeTime(9), &messages);
        assert!(
            taken.parts() > PARTS_PER_ANSWER,
            "a book of several answers"
        );
        let mut expected = BookBuilder::new();
        for m in &messages {
            expected.apply(m).unwrap();
        }
        // A reader with a stale book: part 0 starts it over.
        let mut book = BookBuilder::new();
        book.apply(&adds(1)[0]).unwrap();
        let mut assembly = Assembly::new(70, parts_max(2000));
        let mut asked = vec![assembly.request()];
        while let Some(&(packet_seq, part)) = asked.last() {
            let mut whole = false;
            for bytes in taken.answer(packet_seq, part) {
                let data = wire::parse_market_data(bytes).unwrap();
                assert_eq!(data.mold.sequence(), 5000);
                assert!(bytes.len() <= mold::PAYLOAD_MAX);
                match assembly.insert(&data.header, bytes) {
                    Insert::Kept { ask: true } => asked.push(assembly.request()),
                    Insert::Whole => whole = true,
                    Insert::Kept { ask: false } => {}
                    other => panic!("{other:?}"),
                }
            }
            if whole {
                break;
            }
        }
        assert_eq!(asked.len(), taken.parts().div_ceil(PARTS_PER_ANSWER));
        assert_eq!(assembly.packet_seq(), 77);
        for bytes in assembly.into_parts() {
            book.apply_packet(&wire::parse_market_data(&bytes).unwrap())
                .unwrap();
        }
        for locate in 0..3 {
            for side in [Side::Buy, Side::Sell] {
                assert_eq!(
                    book.depth(locate, side, usize::MAX),
                    expected.depth(locate, side, usize::MAX)
                );
            }
        }
        assert_eq!(book.orders(), 2000);
    }

    #[test]
    fn a_part_claiming_more_parts_than_a_book_can_fill_is_dropped() {
        let taken = Taken::new(session(), 1, 1, ExchangeTime(0), &adds(1000));
        let bytes = &taken.answer(1, 0)[0];
        let header = wire::parse_market_data(bytes).unwrap().header;
        assert_eq!(
            Assembly::new(1, parts_max(100)).insert(&header, bytes),
            Insert::Stale
        );
        assert!(taken.parts() <= parts_max(1000));
        assert!(Taken::new(session(), 1, 1, ExchangeTime(0), &adds(1)).parts() <= parts_max(1));
    }

    #[test]
    fn an_empty_book_is_one_empty_part() {
        let taken = Taken::new(session(), 1, 1, ExchangeTime(0), &[]);
        assert_eq!(taken.parts(), 1);
        let data = wire::parse_market_data(&taken.answer(1, 0)[0]).unwrap();
        assert_eq!(data.header.snapshot_part(), Some((0, 1)));
        assert_eq!(data.message_count(), 0);
    }

    #[test]
    fn a_newer_snapshot_starts_the_assembly_over_and_an_older_one_is_stale() {
        let old = Taken::new(session(), 100, 10, ExchangeTime(0), &adds(100));
        let new = Taken::new(session(), 200, 20, ExchangeTime(0), &adds(100));
        let mut assembly = Assembly::new(10, parts_max(100));
        let part = |t: &Taken, i: usize| t.answer(t.packet_seq, i as u32)[0].clone();
        let header = |bytes: &[u8]| wire::parse_market_data(bytes).unwrap().header;
        let b = part(&old, 0);
        assert_eq!(
            assembly.insert(&header(&b), &b),
            Insert::Kept { ask: false }
        );
        assert_eq!(assembly.insert(&header(&b), &b), Insert::Duplicate);
        let b = part(&new, 1);
        assert!(matches!(
            assembly.insert(&header(&b), &b),
            Insert::Kept { .. }
        ));
        assert_eq!(
            assembly.request(),
            (20, 0),
            "the newer one, from its first part"
        );
        let b = part(&old, 1);
        assert_eq!(assembly.insert(&header(&b), &b), Insert::Stale);
        // A later skip past it: the parts held no longer do.
        assembly.cover(25);
        assert_eq!(assembly.request(), (25, 0));
        // The root answers a request for a snapshot it does not have from its first part.
        assert_eq!(new.answer(25, 1)[0], part(&new, 0));
        assert_eq!(new.answer(20, 1)[0], part(&new, 1));
    }
}

//! Replaying LOBSTER level-10 files through the engine, two ways.
//!
//! Parsing takes `&str` (the caller reads the files), so this module does no I/O.
//!
//! **Seeding.** The sample starts mid-day: orders resting before the file are referenced by
//! later messages, and the first orderbook row already shows 10 levels a side. Row 1 is the
//! book *after* message 1, so the book before the file is row 1 with message 1's effect undone
//! (an add subtracted, a cancel/delete/execution added back). We seed one synthetic order per
//! visible level of that book, with the level's total size and ids from [`SEED_ID_BASE`]. Only
//! aggregate sizes are known for those orders, so a later message that names an id the file
//! never added (a pre-file order) is applied to the seed order at its side and price: a cancel
//! or execution of `n` shares shrinks the seed by `n` (keeping its priority, which is right:
//! every pre-file order is older than every in-file order at that price). Levels below the
//! 10th before the file are unknown; a message reaching into one is reported, not guessed.
//!
//! **Book building** ([`build_book`]): adds become GTC orders, partial cancels and visible
//! executions become size-down replaces (or cancels at zero), deletes become cancels; hidden
//! executions (type 5), crosses (6) and halts (7) do not touch the visible book. After every
//! message the top 10 levels must equal that message's orderbook row.
//!
//! **Matching** ([`match_executions`]): instead of applying executions, each run of visible
//! executions (type 4) at one timestamp against one side becomes one aggressive order from the
//! other side, with quantity the run's total and limit the run's worst price; if the next
//! message is an add on the aggressor's side at the same timestamp, it is the order's unfilled
//! remainder: the order takes that add's id, price and extra size and is GTC. Hidden
//! executions inside a run are skipped (the engine has no hidden orders). The engine's fills
//! are then compared, in order, with the run's execution rows.

use core::fmt;

use crate::{
    CancelOrder, Engine, EngineConfig, Event, Input, LevelView, NewOrder, OrderId, OrderKind,
    ParticipantId, Price, Qty, ReplaceOrder, Side, SymbolConfig, SymbolIndex,
};

/// Seed orders get ids `SEED_ID_BASE + k`, far above LOBSTER's ids.
pub const SEED_ID_BASE: u64 = 1 << 48;
/// Aggressive orders synthesised from execution runs without a remainder get these ids.
pub const TAKER_ID_BASE: u64 = 1 << 49;
/// LOBSTER prices are dollars × 10,000; the tick is one cent.
pub const TICK_SIZE: i64 = 100;
/// Levels per side in a level-10 file.
pub const DEPTH: usize = 10;

const SYMBOL: SymbolIndex = SymbolIndex(0);
const SEED_PARTICIPANT: ParticipantId = ParticipantId(0);
const FILE_PARTICIPANT: ParticipantId = ParticipantId(1);
const DUMMY_PRICE_ABS: i64 = 9_999_999_999;

/// LOBSTER event types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageKind {
    /// 1: a new limit order.
    Submit,
    /// 2: partial cancel.
    Cancel,
    /// 3: delete.
    Delete,
    /// 4: execution of a visible order.
    Execute,
    /// 5: execution of a hidden order.
    ExecuteHidden,
    /// 6: cross trade.
    Cross,
    /// 7: trading halt.
    Halt,
}

/// One row of a message file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    /// Nanoseconds after midnight.
    pub time_ns: u64,
    /// Event type.
    pub kind: MessageKind,
    /// LOBSTER order id (0 for hidden executions).
    pub order_id: u64,
    /// Shares.
    pub size: i64,
    /// Dollars × 10,000.
    pub price: i64,
    /// The order's side (for executions: the resting order's side).
    pub side: Side,
}

/// One row of an orderbook file: visible levels, best first, dummy levels dropped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BookRow {
    /// (price, size) of the bid levels.
    pub bids: Vec<(i64, i64)>,
    /// (price, size) of the ask levels.
    pub asks: Vec<(i64, i64)>,
}

/// A malformed line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub reason: String,
}

/// A day, ns: a LOBSTER time is seconds after midnight.
const DAY_NS: u64 = 86_400 * 1_000_000_000;

/// Parses a message file: every line six fields, times in order within the day.
pub fn parse_messages(text: &str) -> Result<Vec<Message>, ParseError> {
    let mut messages = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let error = |reason: String| ParseError { line, reason };
        let fields: Vec<&str> = raw.trim_end_matches('\r').split(',').collect();
        let [time, kind, id, size, price, direction] = fields[..] else {
            return Err(error(format!("expected 6 fields, found {}", fields.len())));
        };
        let number = |name: &str, s: &str| {
            s.parse::<i64>()
                .map_err(|e| error(format!("{name} {s:?}: {e}")))
        };
        let kind = match number("type", kind)? {
            1 => MessageKind::Submit,
            2 => MessageKind::Cancel,
            3 => MessageKind::Delete,
            4 => MessageKind::Execute,
            5 => MessageKind::ExecuteHidden,
            6 => MessageKind::Cross,
            7 => MessageKind::Halt,
            other => return Err(error(format!("unknown event type {other}"))),
        };
        let side = match number("direction", direction)? {
            1 => Side::Buy,
            -1 => Side::Sell,
            other => return Err(error(format!("direction must be 1 or -1, found {other}"))),
        };
        let order_id = u64::try_from(number("order id", id)?)
            .map_err(|_| error("negative order id".into()))?;
        let size = number("size", size)?;
        if size <= 0 && kind != MessageKind::Halt && kind != MessageKind::Cross {
            return Err(error(format!("size must be positive, found {size}")));
        }
        let time_ns = parse_time_ns(time).ok_or_else(|| error(format!("bad time {time:?}")))?;
        // Seconds after midnight of one trading day, in order: the replay groups a
        // marketable order's executions by their shared timestamp.
        if time_ns >= DAY_NS {
            return Err(error(format!(
                "time {time} is past the day's end (seconds after midnight)"
            )));
        }
        if let Some(previous) = messages.last().map(|m: &Message| m.time_ns)
            && time_ns < previous
        {
            return Err(error(format!(
                "time {time} is before the line above's ({}.{:09} s): the file is out of order",
                previous / 1_000_000_000,
                previous % 1_000_000_000
            )));
        }
        messages.push(Message {
            time_ns,
            kind,
            order_id,
            size,
            price: number("price", price)?,
            side,
        });
    }
    Ok(messages)
}

/// Parses an orderbook file (any number of levels per row).
pub fn parse_orderbook(text: &str) -> Result<Vec<BookRow>, ParseError> {
    let mut rows = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let error = |reason: String| ParseError { line, reason };
        let values = raw
            .trim_end_matches('\r')
            .split(',')
            .map(|f| {
                f.parse::<i64>()
                    .map_err(|e| error(format!("field {f:?}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if values.is_empty() || values.len() % 4 != 0 {
            return Err(error(format!(
                "expected a multiple of 4 fields, found {}",
                values.len()
            )));
        }
        let mut row = BookRow::default();
        for level in values.chunks_exact(4) {
            let [ask, ask_size, bid, bid_size] = [level[0], level[1], level[2], level[3]];
            if ask.abs() != DUMMY_PRICE_ABS {
                row.asks.push((ask, ask_size));
            }
            if bid.abs() != DUMMY_PRICE_ABS {
                row.bids.push((bid, bid_size));
            }
        }
        rows.push(row);
    }
    Ok(rows)
}

/// Seconds with up to 9 decimals, parsed as a string into integer nanoseconds.
fn parse_time_ns(s: &str) -> Option<u64> {
    let (secs, frac) = s.split_once('.').unwrap_or((s, ""));
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) || secs.is_empty() {
        return None;
    }
    let secs: u64 = secs.parse().ok()?;
    let frac_ns: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse::<u64>().ok()? * 10u64.pow(9 - frac.len() as u32)
    };
    secs.checked_mul(1_000_000_000)?.checked_add(frac_ns)
}

/// The first step where the engine's book differs from the orderbook file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BookMismatch {
    /// 1-based message number (= orderbook row).
    pub step: usize,
    /// The message applied last.
    pub message: Message,
    /// The orderbook file's row.
    pub expected: BookRow,
    /// The engine's top levels.
    pub actual: BookRow,
}

/// Why a replay could not go on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// The files disagree in length or are empty.
    #[error(
        "{messages} messages but {rows} orderbook rows (a replay needs one orderbook row per \
         message, and at least one)"
    )]
    Lengths {
        /// Message count.
        messages: usize,
        /// Row count.
        rows: usize,
    },
    /// A message the seeded book cannot explain.
    #[error("message {step}: {reason}")]
    Unexplained {
        /// 1-based message number.
        step: usize,
        /// What went wrong.
        reason: String,
    },
}

/// Result of [`build_book`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BookReport {
    /// Messages applied.
    pub messages: usize,
    /// Rows where the engine's top 10 equal the file's.
    pub rows_matched: usize,
    /// Synthetic orders placed from the first row (the book before the file).
    pub seed_orders: usize,
    /// Levels beyond the 10th that changed unseen and were re-synchronised from the orderbook
    /// file when they came into view (see the module docs).
    pub unseen_changes: usize,
    /// Messages that referred to pre-file orders (applied to seeds).
    pub prefile_references: usize,
    /// Hidden executions, crosses and halts (no visible book effect).
    pub invisible_messages: usize,
    /// The first differing row, if any.
    pub first_mismatch: Option<BookMismatch>,
}

/// Result of [`match_executions`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MatchReport {
    /// Aggressive orders synthesised from execution runs.
    pub aggressive_orders: usize,
    /// ... of which carried a resting remainder (an add right after the run).
    pub with_remainder: usize,
    /// Visible execution rows (type 4) in the file.
    pub executions: usize,
    /// Hidden execution rows (type 5) inside runs, skipped.
    pub hidden_in_runs: usize,
    /// Hidden execution rows outside runs.
    pub hidden_alone: usize,
    /// Expected fills after merging consecutive pre-file executions at one price (the seed
    /// holds their sum as one order).
    pub fills_expected: usize,
    /// Fills the engine produced.
    pub fills_engine: usize,
    /// Fills equal in maker id, quantity and price.
    pub fills_exact: usize,
    /// Fills against a seed order standing for the pre-file makers LOBSTER named, equal in
    /// price and quantity.
    pub fills_seed: usize,
    /// Every differing fill position, with both sides.
    pub mismatches: Vec<FillMismatch>,
    /// Levels beyond the 10th re-synchronised when they came into view.
    pub unseen_changes: usize,
    /// Messages that named orders the file never added (applied to synthetic orders).
    pub prefile_references: usize,
    /// Orderbook rows compared (after each run and each other message).
    pub rows_compared: usize,
    /// ... of which equal.
    pub rows_matched: usize,
    /// The first differing row, if any.
    pub first_book_mismatch: Option<BookMismatch>,
}

/// A fill position where the engine and LOBSTER differ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FillMismatch {
    /// 1-based message number of the run's first execution.
    pub step: usize,
    /// (maker id, qty, price) LOBSTER reports, if any at this position.
    pub expected: Option<(u64, i64, i64)>,
    /// (maker id, qty, price) the engine produced, if any.
    pub actual: Option<(u64, i64, i64)>,
}

/// The engine plus the bookkeeping of pre-file orders.
struct Replayer {
    engine: Engine,
    events: Vec<Event>,
    /// Synthetic orders created so far (ids from [`SEED_ID_BASE`]).
    synthetic_count: u64,
    prefile_references: usize,
}

/// Book building: see the module docs. Fails only if a message cannot be applied at all.
pub fn build_book(messages: &[Message], rows: &[BookRow]) -> Result<BookReport, ReplayError> {
    let mut replayer = Replayer::seeded(messages, rows)?;
    let mut report = BookReport {
        messages: messages.len(),
        rows_matched: 0,
        seed_orders: replayer.synthetic_count as usize,
        unseen_changes: 0,
        prefile_references: 0,
        invisible_messages: 0,
        first_mismatch: None,
    };
    for (i, message) in messages.iter().enumerate() {
        let visible = replayer.apply(i + 1, message)?;
        report.invisible_messages += usize::from(!visible);
        let before = i.checked_sub(1).map(|k| &rows[k]);
        report.unseen_changes += replayer.sync_hidden(i + 1, before, &rows[i])?;
        let actual = replayer.top();
        if actual == rows[i] {
            report.rows_matched += 1;
        } else if report.first_mismatch.is_none() {
            let expected = rows[i].clone();
            report.first_mismatch = Some(BookMismatch {
                step: i + 1,
                message: *message,
                expected,
                actual,
            });
        }
    }
    report.prefile_references = replayer.prefile_references;
    Ok(report)
}

/// Matching: see the module docs.
pub fn match_executions(
    messages: &[Message],
    rows: &[BookRow],
) -> Result<MatchReport, ReplayError> {
    let mut replayer = Replayer::seeded(messages, rows)?;
    let executions = count(messages, MessageKind::Execute);
    let mut report = MatchReport {
        executions,
        ..MatchReport::default()
    };
    let mut i = 0;
    while i < messages.len() {
        let message = messages[i];
        let last = if message.kind == MessageKind::Execute {
            replayer.aggress(messages, i, &mut report)?
        } else {
            replayer.apply(i + 1, &message)?;
            report.hidden_alone += usize::from(message.kind == MessageKind::ExecuteHidden);
            i
        };
        let before = i.checked_sub(1).map(|k| &rows[k]);
        report.unseen_changes += replayer.sync_hidden(last + 1, before, &rows[last])?;
        let actual = replayer.top();
        report.rows_compared += 1;
        if actual == rows[last] {
            report.rows_matched += 1;
        } else if report.first_book_mismatch.is_none() {
            let (message, expected) = (messages[last], rows[last].clone());
            report.first_book_mismatch = Some(BookMismatch {
                step: last + 1,
                message,
                expected,
                actual,
            });
        }
        i = last + 1;
    }
    report.prefile_references = replayer.prefile_references;
    Ok(report)
}

fn count(messages: &[Message], kind: MessageKind) -> usize {
    messages.iter().filter(|m| m.kind == kind).count()
}

impl Replayer {
    /// An engine holding the book as it stood before message 1 (see the module docs).
    fn seeded(messages: &[Message], rows: &[BookRow]) -> Result<Self, ReplayError> {
        if messages.is_empty() || messages.len() != rows.len() {
            return Err(ReplayError::Lengths {
                messages: messages.len(),
                rows: rows.len(),
            });
        }
        let symbol = SymbolConfig {
            tick_size: TICK_SIZE,
            price_min: Price(TICK_SIZE),
            price_max: Price(1_000_000_000 * TICK_SIZE),
            window_ticks: 1024,
        };
        let config = EngineConfig {
            symbols: vec![symbol],
            orders_max: 1 << 16,
            levels_max: 1 << 12,
            order_qty_max: 1 << 40,
            stp_participants: Vec::new(),
        };
        let engine = Engine::new(config).map_err(|e| ReplayError::Unexplained {
            step: 0,
            reason: e.to_string(),
        })?;
        let mut replayer = Self {
            engine,
            events: Vec::new(),
            synthetic_count: 0,
            prefile_references: 0,
        };
        let mut before = rows[0].clone();
        let first = messages[0];
        let undo = match first.kind {
            MessageKind::Submit => -first.size,
            MessageKind::Cancel | MessageKind::Delete | MessageKind::Execute => first.size,
            _ => 0,
        };
        let levels = match first.side {
            Side::Buy => &mut before.bids,
            Side::Sell => &mut before.asks,
        };
        match levels.iter_mut().find(|l| l.0 == first.price) {
            Some(level) => level.1 += undo,
            None if undo > 0 => levels.push((first.price, undo)),
            None => {}
        }
        before.bids.retain(|l| l.1 > 0);
        before.asks.retain(|l| l.1 > 0);
        replayer.sync_hidden(0, None, &before)?;
        Ok(replayer)
    }

    /// Applies one message to the visible book; false if it has no visible effect.
    fn apply(&mut self, step: usize, m: &Message) -> Result<bool, ReplayError> {
        match m.kind {
            MessageKind::Submit => {
                self.submit(
                    step,
                    m.order_id,
                    FILE_PARTICIPANT,
                    m.side,
                    OrderKind::Gtc,
                    m.price,
                    m.size,
                )?;
                if self.events.iter().any(|e| matches!(e, Event::Fill(_))) {
                    return Err(unexplained(step, "an add crossed the engine's book"));
                }
            }
            MessageKind::Cancel | MessageKind::Execute => self.reduce(step, m, m.size)?,
            MessageKind::Delete => self.reduce(step, m, i64::MAX)?,
            MessageKind::ExecuteHidden | MessageKind::Cross | MessageKind::Halt => {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Shrinks the order `m` names by `size` (everything if `i64::MAX`), or, if it is an order
    /// the file never showed (pre-file or added while its level was hidden), the synthetic
    /// orders standing for the level's unseen quantity, oldest first.
    fn reduce(&mut self, step: usize, m: &Message, size: i64) -> Result<(), ReplayError> {
        if let Some(order) = self.engine.order(OrderId(m.order_id)) {
            if order.price.0 != m.price || order.side != m.side {
                let reason = format!(
                    "order {} rests at {:?} {}",
                    m.order_id, order.price, order.side
                );
                return Err(unexplained(step, &reason));
            }
            if size != i64::MAX && size > order.qty.0 {
                let reason = format!(
                    "removing {size} from order {} holding {}",
                    m.order_id, order.qty.0
                );
                return Err(unexplained(step, &reason));
            }
            return self.shrink(step, m.order_id, size.min(order.qty.0));
        }
        self.prefile_references += 1;
        // A delete of an unseen order removes LOBSTER's size for it.
        let mut size = if size == i64::MAX { m.size } else { size };
        let synthetic: Vec<OrderId> = self
            .engine
            .level_orders(SYMBOL, m.side, Price(m.price))
            .into_iter()
            .filter(|id| is_synthetic(id.0))
            .collect();
        for id in synthetic {
            let held = self.engine.order(id).map_or(0, |o| o.qty.0);
            let take = held.min(size);
            self.shrink(step, id.0, take)?;
            size -= take;
            if size == 0 {
                return Ok(());
            }
        }
        let reason = format!(
            "order {} is unknown and {size} shares at {} are unexplained",
            m.order_id, m.price
        );
        Err(unexplained(step, &reason))
    }

    /// Removes `size` shares from resting order `id` (a cancel at zero).
    fn shrink(&mut self, step: usize, id: u64, size: i64) -> Result<(), ReplayError> {
        let order = self
            .engine
            .order(OrderId(id))
            .ok_or_else(|| unexplained(step, "order vanished"))?;
        let left = order.qty.0 - size;
        let input = if left <= 0 {
            Input::Cancel(CancelOrder {
                order_id: OrderId(id),
                participant: order.participant,
                symbol: SYMBOL,
            })
        } else {
            Input::Replace(ReplaceOrder {
                order_id: OrderId(id),
                participant: order.participant,
                symbol: SYMBOL,
                price: order.price,
                qty: Qty(left),
            })
        };
        self.input(step, &input)
    }

    /// Brings levels that were hidden in `before` (beyond its 10th level; everything if
    /// `None`) and are visible in `after` to `after`'s sizes: a level-10 message file carries
    /// no events beyond the 10th level, so such a level may have changed unseen. Levels visible
    /// in `before` are never touched, so this cannot mask a wrong visible book. Returns the
    /// number of levels changed.
    fn sync_hidden(
        &mut self,
        step: usize,
        before: Option<&BookRow>,
        after: &BookRow,
    ) -> Result<usize, ReplayError> {
        let mut changed = 0;
        for side in [Side::Buy, Side::Sell] {
            let pick = |row: &BookRow| match side {
                Side::Buy => row.bids.clone(),
                Side::Sell => row.asks.clone(),
            };
            let worse = |a: i64, b: i64| if side == Side::Buy { a < b } else { a > b };
            let hidden_beyond = match before.map(pick) {
                None => None,
                Some(levels) if levels.len() < DEPTH => continue,
                Some(levels) => Some(levels[DEPTH - 1].0),
            };
            let was_hidden = |p: i64| hidden_beyond.is_none_or(|edge| worse(p, edge));
            let visible = pick(after);
            let now_visible = |p: i64| visible.len() < DEPTH || !worse(p, visible[DEPTH - 1].0);
            let mut engine_levels = Vec::new();
            self.engine
                .depth(SYMBOL, side, usize::MAX, &mut engine_levels);
            let mut prices: Vec<i64> = visible.iter().map(|l| l.0).collect();
            prices.extend(engine_levels.iter().map(|l| l.price.0));
            prices.sort_unstable();
            prices.dedup();
            for price in prices
                .into_iter()
                .filter(|&p| was_hidden(p) && now_visible(p))
            {
                let target = visible.iter().find(|l| l.0 == price).map_or(0, |l| l.1);
                let held = engine_levels
                    .iter()
                    .find(|l| l.price.0 == price)
                    .map_or(0, |l| l.qty.0);
                if target != held {
                    self.adjust(step, side, price, target - held)?;
                    changed += 1;
                }
            }
        }
        Ok(changed)
    }

    /// Adds `delta` unseen shares at a level (a new synthetic order) or removes `-delta`
    /// (synthetic orders first, then file orders newest first).
    fn adjust(
        &mut self,
        step: usize,
        side: Side,
        price: i64,
        delta: i64,
    ) -> Result<(), ReplayError> {
        if delta > 0 {
            let id = SEED_ID_BASE + self.synthetic_count;
            self.synthetic_count += 1;
            return self.submit(
                step,
                id,
                SEED_PARTICIPANT,
                side,
                OrderKind::Gtc,
                price,
                delta,
            );
        }
        let queue = self.engine.level_orders(SYMBOL, side, Price(price));
        let synthetic = queue.iter().filter(|id| is_synthetic(id.0));
        let newest_first = queue.iter().rev().filter(|id| !is_synthetic(id.0));
        let queue: Vec<OrderId> = synthetic.chain(newest_first).copied().collect();
        let mut size = -delta;
        for id in queue {
            let held = self.engine.order(id).map_or(0, |o| o.qty.0);
            let take = held.min(size);
            self.shrink(step, id.0, take)?;
            size -= take;
            if size == 0 {
                break;
            }
        }
        Ok(())
    }

    /// Turns the execution run starting at `start` into one aggressive order; returns the index
    /// of the run's last message (the remainder add, if any).
    fn aggress(
        &mut self,
        messages: &[Message],
        start: usize,
        report: &mut MatchReport,
    ) -> Result<usize, ReplayError> {
        let head = messages[start];
        let in_run = |m: &Message| {
            m.time_ns == head.time_ns
                && m.side == head.side
                && matches!(m.kind, MessageKind::Execute | MessageKind::ExecuteHidden)
        };
        let mut end = start;
        while end + 1 < messages.len() && in_run(&messages[end + 1]) {
            end += 1;
        }
        let run = &messages[start..=end];
        report.hidden_in_runs += run
            .iter()
            .filter(|m| m.kind == MessageKind::ExecuteHidden)
            .count();
        let visible: Vec<&Message> = run
            .iter()
            .filter(|m| m.kind == MessageKind::Execute)
            .collect();
        let expected = self.expected_fills(&visible);
        let aggressor = head.side.opposite();
        let qty: i64 = visible.iter().map(|m| m.size).sum();
        let worst = visible.last().map_or(head.price, |m| m.price);
        let remainder = messages.get(end + 1).filter(|m| {
            m.kind == MessageKind::Submit && m.time_ns == head.time_ns && m.side == aggressor
        });
        let (id, kind, price, qty, last) = match remainder {
            Some(add) => (
                add.order_id,
                OrderKind::Gtc,
                add.price,
                qty + add.size,
                end + 1,
            ),
            None => (
                TAKER_ID_BASE + report.aggressive_orders as u64,
                OrderKind::Ioc,
                worst,
                qty,
                end,
            ),
        };
        report.aggressive_orders += 1;
        report.with_remainder += usize::from(remainder.is_some());
        self.submit(start + 1, id, FILE_PARTICIPANT, aggressor, kind, price, qty)?;
        let actual: Vec<(u64, i64, i64)> = self
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Fill(f) => Some((f.maker_order_id.0, f.qty.0, f.price.0)),
                _ => None,
            })
            .collect();
        report.fills_expected += expected.len();
        report.fills_engine += actual.len();
        for k in 0..expected.len().max(actual.len()) {
            let (want, got) = (expected.get(k).copied(), actual.get(k).copied());
            match (want, got) {
                (Some(w), Some(g)) if w == g => report.fills_exact += 1,
                (Some((SEED_MAKER, wq, wp)), Some((gid, gq, gp)))
                    if is_synthetic(gid) && (wq, wp) == (gq, gp) =>
                {
                    report.fills_seed += 1;
                }
                _ => report.mismatches.push(FillMismatch {
                    step: start + 1,
                    expected: want,
                    actual: got,
                }),
            }
        }
        Ok(last)
    }

    /// LOBSTER's fills for a run as (maker, qty, price), with consecutive executions of
    /// pre-file orders at one price merged into one fill against [`SEED_MAKER`].
    fn expected_fills(&self, visible: &[&Message]) -> Vec<(u64, i64, i64)> {
        let mut fills: Vec<(u64, i64, i64)> = Vec::new();
        for m in visible {
            let known = self.engine.order(OrderId(m.order_id)).is_some();
            let maker = if known { m.order_id } else { SEED_MAKER };
            match fills.last_mut() {
                Some(last) if maker == SEED_MAKER && last.0 == SEED_MAKER && last.2 == m.price => {
                    last.1 += m.size
                }
                _ => fills.push((maker, m.size, m.price)),
            }
        }
        fills
    }

    #[allow(clippy::too_many_arguments)]
    fn submit(
        &mut self,
        step: usize,
        id: u64,
        participant: ParticipantId,
        side: Side,
        kind: OrderKind,
        price: i64,
        qty: i64,
    ) -> Result<(), ReplayError> {
        let order = NewOrder {
            order_id: OrderId(id),
            participant,
            symbol: SYMBOL,
            side,
            kind,
            price: Price(price),
            qty: Qty(qty),
        };
        self.input(step, &Input::New(order))
    }

    fn input(&mut self, step: usize, input: &Input) -> Result<(), ReplayError> {
        self.events.clear();
        self.engine.handle_input(input, &mut self.events);
        match self.events.first() {
            Some(Event::Accept { .. }) => Ok(()),
            Some(Event::Reject { reason, .. }) => {
                let what = match input {
                    Input::New(o) => format!(
                        "new order {} ({:?} {} at {})",
                        o.order_id.0, o.side, o.qty.0, o.price.0
                    ),
                    _ => "its request".to_string(),
                };
                Err(unexplained(
                    step,
                    &format!("the engine rejected {what}: {reason:?}"),
                ))
            }
            other => Err(unexplained(
                step,
                &format!("engine answered {other:?} to {input:?}"),
            )),
        }
    }

    /// The engine's top 10 levels a side, in orderbook-row form.
    fn top(&self) -> BookRow {
        let mut levels = Vec::with_capacity(DEPTH);
        let mut row = BookRow::default();
        for side in [Side::Buy, Side::Sell] {
            levels.clear();
            self.engine.depth(SYMBOL, side, DEPTH, &mut levels);
            let out = match side {
                Side::Buy => &mut row.bids,
                Side::Sell => &mut row.asks,
            };
            out.extend(levels.iter().map(|l: &LevelView| (l.price.0, l.qty.0)));
        }
        row
    }
}

/// Stands for "some pre-file order" in expected fills.
const SEED_MAKER: u64 = u64::MAX;

fn is_synthetic(id: u64) -> bool {
    (SEED_ID_BASE..TAKER_ID_BASE).contains(&id)
}

fn unexplained(step: usize, reason: &str) -> ReplayError {
    ReplayError::Unexplained {
        step,
        reason: reason.to_string(),
    }
}

impl fmt::Display for BookRow {
    /// Both sides side by side, one level a line: `bid size @ price | price @ size ask`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for k in 0..self.bids.len().max(self.asks.len()) {
            let bid = self
                .bids
                .get(k)
                .map_or(String::new(), |(p, s)| format!("{s} @ {p}"));
            let ask = self
                .asks
                .get(k)
                .map_or(String::new(), |(p, s)| format!("{p} @ {s}"));
            writeln!(f, "{bid:>18} | {ask:<18}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_is_parsed_exactly() {
        assert_eq!(parse_time_ns("34200.004241176"), Some(34_200_004_241_176));
        assert_eq!(parse_time_ns("34200.00426064"), Some(34_200_004_260_640));
        assert_eq!(parse_time_ns("34201"), Some(34_201_000_000_000));
        assert_eq!(parse_time_ns("1.0000000001"), None);
        assert_eq!(parse_time_ns("1.-5"), None);
    }

    #[test]
    fn malformed_lines_name_their_line() {
        let text = "34200.1,1,5,10,5853300,1\n34200.2,9,5,10,5853300,1";
        assert_eq!(parse_messages(text).unwrap_err().line, 2);
        assert_eq!(
            parse_messages("34200.1,1,5,10,5853300").unwrap_err().line,
            1
        );
        assert_eq!(parse_orderbook("1,2,3,4\n1,2,3").unwrap_err().line, 2);
        // Found by a hostile-input sweep: times out of order or past the day were taken.
        let backwards = "34200.2,1,5,10,5853300,1\n34200.1,1,6,10,5853300,1";
        let error = parse_messages(backwards).unwrap_err();
        assert_eq!(error.line, 2);
        assert!(error.reason.contains("out of order"), "{}", error.reason);
        let error = parse_messages("9999999999,1,5,10,5853300,1").unwrap_err();
        assert!(error.reason.contains("past the day"), "{}", error.reason);
        let same = "34200.1,1,5,10,5853300,1\n34200.1,4,5,10,5853300,1";
        assert_eq!(
            parse_messages(same).unwrap().len(),
            2,
            "one timestamp, two messages"
        );
        let rows = parse_orderbook("5859400,200,5853300,18,9999999999,0,-9999999999,0").unwrap();
        assert_eq!(
            rows[0],
            BookRow {
                bids: vec![(5853300, 18)],
                asks: vec![(5859400, 200)]
            }
        );
    }
}

//! Independent simulations on every core: the paper campaigns' cases are whole serial runs,
//! so running several at once changes no result.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

/// The cores this process may run on (1 if the system cannot say).
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// How many threads [`on_every_core`] runs `items` items on: one per core, at most one per
/// item, at least one.
pub(crate) fn count(items: usize) -> usize {
    available_cores().clamp(1, items.max(1))
}

/// Runs `work` on every item, on as many threads as the machine has (at most one per item),
/// and returns the results in item order. `work` gets the item's index and a sink for
/// progress lines; this thread hands each line to `progress` as it comes.
pub(crate) fn on_every_core<T: Sync, R: Send>(
    items: &[T],
    work: impl Fn(usize, &T, &dyn Fn(String)) -> R + Sync,
    progress: &mut dyn FnMut(&str),
) -> Vec<R> {
    enum Message<R> {
        Progress(String),
        Done(usize, R),
    }
    let jobs = count(items.len());
    let next = AtomicUsize::new(0);
    let mut results: Vec<Option<R>> = items.iter().map(|_| None).collect();
    std::thread::scope(|scope| {
        let (sender, receiver) = mpsc::channel();
        for _ in 0..jobs {
            let (sender, next, work) = (sender.clone(), &next, &work);
            scope.spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    // The receiver outlives the workers (it is dropped after them).
                    let say = |line: String| {
                        let _ = sender.send(Message::Progress(line));
                    };
                    let result = work(i, item, &say);
                    let _ = sender.send(Message::Done(i, result));
                }
            });
        }
        drop(sender);
        for message in receiver {
            match message {
                Message::Progress(line) => progress(&line),
                Message::Done(i, result) => results[i] = Some(result),
            }
        }
    });
    results
        .into_iter()
        .map(|result| result.expect("every item ran"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_item_order_with_every_progress_line() {
        let items: Vec<u64> = (0..37).collect();
        let mut lines = Vec::new();
        let results = on_every_core(
            &items,
            |i, &item, say| {
                say(format!("{i}"));
                item * item
            },
            &mut |line| lines.push(line.to_owned()),
        );
        assert_eq!(results, items.iter().map(|i| i * i).collect::<Vec<_>>());
        lines.sort_by_key(|line| line.parse::<usize>().unwrap());
        assert_eq!(lines, (0..37).map(|i| i.to_string()).collect::<Vec<_>>());
    }
}

//! A request's event channel: one sender (the scheduler), one receiver (the
//! [`crate::RequestHandle`]), a queue whose capacity is reserved when the request is
//! submitted — room for every event a request of a few hundred tokens can send — so that
//! sending, while the receiver keeps within that backlog, never allocates (a general
//! channel's queue grows on the sending side whenever a receiver lags). Receiving blocks
//! (a condition variable), polls, or awaits (one stored waker).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

/// Most events whose room is reserved up front.
const MAX_RESERVED: usize = 512;

struct State<T> {
    queue: VecDeque<T>,
    waker: Option<Waker>,
    sender: bool,
    receiver: bool,
}

struct Chan<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
}

impl<T> Chan<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A panic while holding the lock leaves the queue consistent (every critical
        // section is a push, a pop or a flag).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A channel with room for `events` events (at most [`MAX_RESERVED`]) reserved.
pub(crate) fn channel<T>(events: usize) -> (Sender<T>, Receiver<T>) {
    let chan = Arc::new(Chan {
        state: Mutex::new(State {
            queue: VecDeque::with_capacity(events.min(MAX_RESERVED)),
            waker: None,
            sender: true,
            receiver: true,
        }),
        ready: Condvar::new(),
    });
    (
        Sender {
            chan: Arc::clone(&chan),
        },
        Receiver { chan },
    )
}

/// The sending side.
pub(crate) struct Sender<T> {
    chan: Arc<Chan<T>>,
}

impl<T> Sender<T> {
    /// Queues `v`; `Err(v)` when the receiver is gone.
    pub fn send(&self, v: T) -> Result<(), T> {
        let waker = {
            let mut st = self.chan.lock();
            if !st.receiver {
                return Err(v);
            }
            st.queue.push_back(v);
            st.waker.take()
        };
        self.chan.ready.notify_one();
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let waker = {
            let mut st = self.chan.lock();
            st.sender = false;
            st.waker.take()
        };
        self.chan.ready.notify_all();
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// Why [`Receiver::try_recv`] returned nothing.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum TryRecvError {
    /// Nothing queued yet.
    Empty,
    /// Nothing queued, and the sender is gone.
    Disconnected,
}

/// The receiving side.
pub(crate) struct Receiver<T> {
    chan: Arc<Chan<T>>,
}

impl<T> Receiver<T> {
    /// The next value, blocking; `None` once the queue is empty and the sender gone.
    pub fn recv(&self) -> Option<T> {
        let mut st = self.chan.lock();
        loop {
            if let Some(v) = st.queue.pop_front() {
                return Some(v);
            }
            if !st.sender {
                return None;
            }
            st = self.chan.ready.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The next value if one is queued, without blocking or allocating.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        let mut st = self.chan.lock();
        match st.queue.pop_front() {
            Some(v) => Ok(v),
            None if st.sender => Err(TryRecvError::Empty),
            None => Err(TryRecvError::Disconnected),
        }
    }

    /// The next value, for async code; `None` once the queue is empty and the sender
    /// gone.
    pub fn recv_async(&self) -> RecvFuture<'_, T> {
        RecvFuture { rx: self }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut st = self.chan.lock();
        st.receiver = false;
        // What was never received goes now, not with the last handle on the channel.
        st.queue.clear();
    }
}

/// See [`Receiver::recv_async`].
pub(crate) struct RecvFuture<'a, T> {
    rx: &'a Receiver<T>,
}

impl<T> Future for RecvFuture<'_, T> {
    type Output = Option<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut st = self.rx.chan.lock();
        if let Some(v) = st.queue.pop_front() {
            return Poll::Ready(Some(v));
        }
        if !st.sender {
            return Poll::Ready(None);
        }
        match &st.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => st.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_arrive_in_order_then_the_end() {
        let (tx, rx) = channel(4);
        for i in 0..6 {
            tx.send(i).unwrap();
        }
        assert_eq!(rx.try_recv(), Ok(0));
        drop(tx);
        assert_eq!((1..6).map(|_| rx.recv().unwrap()).sum::<i32>(), 15);
        assert_eq!(rx.recv(), None);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    }

    #[test]
    fn sending_to_a_dropped_receiver_gives_the_value_back() {
        let (tx, rx) = channel(1);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        drop(rx);
        assert_eq!(tx.send(7), Err(7));
    }

    #[test]
    fn a_blocked_receiver_wakes_on_send_and_on_the_senders_end() {
        let (tx, rx) = channel(1);
        let t = std::thread::spawn(move || (rx.recv(), rx.recv()));
        std::thread::sleep(std::time::Duration::from_millis(20));
        tx.send(1).unwrap();
        drop(tx);
        assert_eq!(t.join().unwrap(), (Some(1), None));
    }

    #[test]
    fn the_reserved_room_is_never_outgrown_within_it() {
        let (tx, rx) = channel::<u64>(8);
        let cap = rx.chan.lock().queue.capacity();
        for round in 0..4 {
            for i in 0..8 {
                tx.send(round * 8 + i).unwrap();
            }
            while rx.try_recv().is_ok() {}
        }
        assert_eq!(rx.chan.lock().queue.capacity(), cap);
    }
}

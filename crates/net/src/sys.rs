//! Thin, safe wrappers over the Linux calls the runtime needs: epoll with a nanosecond
//! timeout (whole milliseconds on kernels before 5.11), core pinning, timer slack, socket-buffer sizing and a signal-driven stop flag.
//!
//! Every `unsafe` block in the crate that is not a batched socket call lives here, each with
//! the reason it is sound.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Events one `epoll_wait` returns at most.
pub(crate) const EPOLL_EVENTS_MAX: usize = 256;

/// An epoll set over the sockets of one runtime; each socket is registered with its host's
/// index as the token.
#[derive(Debug)]
pub(crate) struct Epoll {
    fd: RawFd,
    events: Vec<libc::epoll_event>,
    /// Whether the kernel has `epoll_pwait2` (Linux 5.11 and later; a seccomp profile may
    /// refuse it too). Without it, waits go through `epoll_wait`, whose timeout is whole
    /// milliseconds, rounded up so that no wait ends early.
    pwait2: bool,
}

/// `timeout` for `epoll_wait`: whole milliseconds, rounded up (a wait never ends before its
/// deadline), `-1` for none.
fn millis_rounded_up(timeout: Option<Duration>) -> libc::c_int {
    timeout.map_or(-1, |t| {
        let millis = t.as_nanos().div_ceil(1_000_000);
        libc::c_int::try_from(millis).unwrap_or(libc::c_int::MAX)
    })
}

impl Epoll {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: epoll_create1 takes no pointers; a negative result is an error we report.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            fd,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; EPOLL_EVENTS_MAX],
            pwait2: true,
        })
    }

    /// Watches `fd` for readability (level-triggered), reporting `token`.
    pub(crate) fn add(&mut self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: `event` is a valid epoll_event that outlives the call; both fds are open.
        let rc = unsafe { libc::epoll_ctl(self.fd, libc::EPOLL_CTL_ADD, fd, &mut event) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Stops watching `fd`.
    pub(crate) fn remove(&mut self, fd: RawFd) -> io::Result<()> {
        // SAFETY: a null event is allowed for EPOLL_CTL_DEL (kernels since 2.6.9); both fds
        // are open.
        let rc =
            unsafe { libc::epoll_ctl(self.fd, libc::EPOLL_CTL_DEL, fd, core::ptr::null_mut()) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits until a watched socket is readable or `timeout` passes (`None`: forever) and
    /// returns the tokens of the ready sockets. EINTR counts as a timeout.
    pub(crate) fn wait(&mut self, timeout: Option<Duration>) -> io::Result<&[libc::epoll_event]> {
        let spec = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: t.subsec_nanos() as libc::c_long,
        });
        let spec_ptr = spec
            .as_ref()
            .map_or(core::ptr::null(), |s| s as *const libc::timespec);
        let mut n = -1;
        if self.pwait2 {
            // SAFETY: `events` holds EPOLL_EVENTS_MAX initialised entries the kernel may
            // write; `spec_ptr` is null or points at a timespec that outlives the call; a
            // null sigmask leaves the signal mask alone.
            n = unsafe {
                libc::epoll_pwait2(
                    self.fd,
                    self.events.as_mut_ptr(),
                    EPOLL_EVENTS_MAX as libc::c_int,
                    spec_ptr,
                    core::ptr::null(),
                )
            };
            if n < 0
                && matches!(
                    io::Error::last_os_error().raw_os_error(),
                    Some(libc::ENOSYS | libc::EPERM)
                )
            {
                self.pwait2 = false;
            }
        }
        if !self.pwait2 {
            // SAFETY: as above; epoll_wait takes no timespec and no sigmask.
            n = unsafe {
                libc::epoll_wait(
                    self.fd,
                    self.events.as_mut_ptr(),
                    EPOLL_EVENTS_MAX as libc::c_int,
                    millis_rounded_up(timeout),
                )
            };
        }
        if n < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                return Ok(&[]);
            }
            return Err(error);
        }
        Ok(&self.events[..n as usize])
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        // SAFETY: `fd` came from epoll_create1 and is closed exactly once, here.
        unsafe {
            libc::close(self.fd);
        }
    }
}

/// Pins the calling thread to one CPU core.
pub fn pin_current_thread(core: usize) -> io::Result<()> {
    if core >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("core {core} is beyond CPU_SETSIZE"),
        ));
    }
    // SAFETY: an all-zero cpu_set_t is the empty set (what CPU_ZERO produces).
    let mut set: libc::cpu_set_t = unsafe { core::mem::zeroed() };
    // SAFETY: `core` was checked against CPU_SETSIZE above; `set` is a valid cpu_set_t.
    unsafe { libc::CPU_SET(core, &mut set) };
    // SAFETY: pid 0 is the calling thread; `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Restores the default action of `SIGPIPE` (ending the process), which the Rust runtime
/// sets to ignored: a command whose output goes into a pipe that closes (`jasper plan | head`)
/// then ends quietly, as Unix tools do, instead of panicking in `println!`. UDP sockets never
/// raise it.
pub fn default_sigpipe() {
    // SAFETY: setting a signal's disposition to SIG_DFL installs no handler and touches no
    // memory of ours; it is called before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Moves the calling thread to the real-time `SCHED_FIFO` class at `priority` (1..=99), so
/// that ordinary tasks (a compiler, a log shipper) can no longer preempt it: on a shared host
/// this is what keeps a latency tail from being set by the neighbours. Needs `CAP_SYS_NICE`
/// (root). Meant for threads that sleep ([`crate::Mode::Epoll`]): a busy-polling thread at
/// real-time priority starves everything else on its core until the kernel's real-time
/// throttling (by default 50 ms in every second) parks it, which is a far worse stall.
pub fn set_realtime(priority: u8) -> io::Result<()> {
    if !(1..=99).contains(&priority) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("real-time priority {priority} is outside 1..=99"),
        ));
    }
    let param = libc::sched_param {
        sched_priority: libc::c_int::from(priority),
    };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for the call.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // Real-time threads get no timer slack from the kernel anyway; set it for clarity.
    set_timer_slack(1)
}

/// Sets the calling thread's timer slack: by default Linux may wake a sleeping thread up to
/// 50 µs late, far more than the hold-and-release margin.
pub(crate) fn set_timer_slack(nanos: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and no pointers.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_TIMERSLACK,
            nanos.max(1) as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets an integer socket option and reads back what the kernel granted.
pub(crate) fn set_socket_int(
    socket: &impl AsRawFd,
    name: libc::c_int,
    value: usize,
) -> io::Result<usize> {
    let fd = socket.as_raw_fd();
    let value = value.min(libc::c_int::MAX as usize) as libc::c_int;
    // SAFETY: the option value is a c_int that outlives the call, with its size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut granted: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `granted` and `len` are valid for writes and sized as passed.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            name,
            (&mut granted as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(granted.max(0) as usize)
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_signal: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, Ordering::Relaxed);
}

/// Makes SIGINT and SIGTERM set a process-wide stop flag instead of killing the process,
/// so a runtime can stop cleanly and print its summary; returns the flag.
pub fn stop_on_signals() -> io::Result<&'static AtomicBool> {
    catch_stop_signals(0)
}

/// [`stop_on_signals`] once: the first SIGINT (or SIGTERM) sets the flag, and that signal
/// then kills as it would have, so a second Ctrl-C ends a stop that takes too long.
pub fn stop_on_first_signal() -> io::Result<&'static AtomicBool> {
    catch_stop_signals(libc::SA_RESETHAND)
}

fn catch_stop_signals(flags: libc::c_int) -> io::Result<&'static AtomicBool> {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: an all-zero sigaction is a valid starting value (empty mask, no flags).
        let mut action: libc::sigaction = unsafe { core::mem::zeroed() };
        action.sa_sigaction = on_stop_signal as *const () as libc::sighandler_t;
        action.sa_flags = flags;
        // SAFETY: `action` is fully initialised, its handler only stores to an atomic, and a
        // null old-action pointer is allowed.
        let rc = unsafe { libc::sigaction(signal, &action, core::ptr::null_mut()) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(&STOP)
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    use super::{Epoll, millis_rounded_up};
    use crate::clock::now_ns;

    #[test]
    fn epoll_wait_timeouts_round_up_to_whole_milliseconds() {
        assert_eq!(millis_rounded_up(None), -1);
        assert_eq!(millis_rounded_up(Some(Duration::ZERO)), 0);
        assert_eq!(millis_rounded_up(Some(Duration::from_nanos(1))), 1);
        assert_eq!(millis_rounded_up(Some(Duration::from_micros(1_000))), 1);
        assert_eq!(millis_rounded_up(Some(Duration::from_micros(1_001))), 2);
        assert_eq!(millis_rounded_up(Some(Duration::MAX)), libc::c_int::MAX);
    }

    /// Goal: on a kernel without `epoll_pwait2` (before 5.11) the loop still waits and wakes:
    /// a wait with nothing to read lasts its timeout, never less, and a datagram wakes it with
    /// its socket's token. Method: the same epoll set with and without `epoll_pwait2`.
    #[test]
    fn epoll_waits_without_pwait2_as_with_it() {
        for pwait2 in [true, false] {
            let mut epoll = Epoll::new().expect("epoll");
            epoll.pwait2 = pwait2;
            let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
            epoll.add(socket.as_raw_fd(), 7).expect("add");
            let start = now_ns();
            let timeout = Duration::from_micros(2_500);
            let ready = epoll.wait(Some(timeout)).expect("wait").len();
            assert_eq!(ready, 0, "pwait2 {pwait2}");
            let waited = now_ns() - start;
            assert!(
                waited >= 2_500_000,
                "pwait2 {pwait2}: woke after {waited} ns"
            );
            socket
                .send_to(b"x", socket.local_addr().expect("addr"))
                .expect("send");
            let ready = epoll.wait(Some(Duration::from_secs(5))).expect("wait");
            assert_eq!(ready.len(), 1, "pwait2 {pwait2}");
            let token = ready[0].u64;
            assert_eq!(token, 7, "pwait2 {pwait2}");
        }
    }
}

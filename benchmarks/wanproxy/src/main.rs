//! wanproxy: forwards TCP connections from a loopback address to an upstream one, delaying every byte by half a
//! round trip in each direction. Nothing else changes: no loss, no bandwidth cap, no reordering.
//!
//! The bytes never pass through this process: they move from socket to kernel pipe to socket with splice(2). With a
//! delay, each direction of a connection has a reader thread, which moves whatever arrives into a pipe and stamps
//! that run of bytes with the time it may leave, and a writer thread, which splices each run out at its time. The
//! pipes in between hold the bytes "on the wire" (a long link holds bandwidth × delay of them); a full pipe is set
//! aside until its bytes have left, and the reader goes on in another. With no delay one thread per direction passes
//! each run straight through its pipe.
//!
//! The writer sleeps with a timer slack of 1 % of the delay (50 µs to 1 ms): it wakes once for all the runs due
//! within that slack instead of once per run, which spares the CPU a fast stream shares with both ends. A byte thus
//! leaves between its time and 1 % after it, never before.
//!
//! Prints `listening on ADDRESS` (the port chosen when asked for 0) and runs until killed.

use std::io::ErrorKind;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread;
use std::time::{Duration, Instant};

/// Bytes a pipe is asked to hold (Linux's default ceiling for an unprivileged process): a fast stream then costs few
/// system calls and few pipes.
const PIPE_BYTES: usize = 1024 * 1024;

struct Options {
    listen: SocketAddr,
    upstream: SocketAddr,
    one_way: Duration,
}

fn parse_options(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
    let (mut listen, mut upstream, mut rtt_ms) = (None, None, 0.0);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--listen" => listen = Some(value.parse().map_err(|err| format!("--listen {value}: {err}"))?),
            "--upstream" => upstream = Some(value.parse().map_err(|err| format!("--upstream {value}: {err}"))?),
            "--rtt-ms" => rtt_ms = value.parse().map_err(|err| format!("--rtt-ms {value}: {err}"))?,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    let listen: SocketAddr = listen.ok_or("--listen ADDRESS:PORT is required")?;
    if !listen.ip().is_loopback() {
        return Err(format!("--listen {listen}: only loopback addresses (127.x, ::1)"));
    }
    if !(0.0..=10_000.0).contains(&rtt_ms) {
        return Err(format!("--rtt-ms {rtt_ms}: between 0 and 10000"));
    }
    Ok(Options {
        listen,
        upstream: upstream.ok_or("--upstream ADDRESS:PORT is required")?,
        one_way: Duration::from_secs_f64(rtt_ms / 2e3),
    })
}

fn main() {
    let options = parse_options(std::env::args().skip(1)).unwrap_or_else(|problem| {
        eprintln!("wanproxy: {problem}");
        std::process::exit(2);
    });
    let listener = TcpListener::bind(options.listen).unwrap_or_else(|err| {
        eprintln!("wanproxy: cannot listen on {}: {err}", options.listen);
        std::process::exit(1);
    });
    println!("listening on {}", listener.local_addr().expect("bound"));
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        match TcpStream::connect(options.upstream) {
            Ok(upstream) => forward(client, upstream, options.one_way),
            Err(err) => eprintln!("wanproxy: cannot reach {}: {err}", options.upstream),
        }
    }
}

/// Pumps both directions of one connection on their own threads.
fn forward(client: TcpStream, upstream: TcpStream, one_way: Duration) {
    for stream in [&client, &upstream] {
        // A run of bytes leaves as soon as it may: Nagle's algorithm would hold small ones back.
        let _ = stream.set_nodelay(true);
    }
    let pairs = [
        (client.try_clone(), upstream.try_clone()),
        (upstream.try_clone(), client.try_clone()),
    ];
    for pair in pairs {
        if let (Ok(from), Ok(to)) = pair {
            thread::spawn(move || pump(from, to, one_way));
        }
    }
}

/// Linux's splice(2), pipe2(2), poll(2) and prctl(2), declared here to keep the crate free of dependencies.
mod sys {
    unsafe extern "C" {
        pub fn prctl(option: i32, arg2: u64, arg3: u64, arg4: u64, arg5: u64) -> i32;
        pub fn splice(fd_in: i32, off_in: *mut i64, fd_out: i32, off_out: *mut i64, len: usize, flags: u32) -> isize;
        pub fn pipe2(fds: *mut i32, flags: i32) -> i32;
        pub fn fcntl(fd: i32, cmd: i32, ...) -> i32;
        pub fn close(fd: i32) -> i32;
        pub fn poll(fds: *mut PollFd, nfds: u64, timeout_ms: i32) -> i32;
    }
    #[repr(C)]
    pub struct PollFd {
        pub fd: i32,
        pub events: i16,
        pub revents: i16,
    }
    pub const POLLIN: i16 = 1;
    pub const SPLICE_F_MOVE: u32 = 1;
    /// Applies to the pipe only (a blocking socket still waits for data): a full pipe answers EAGAIN.
    pub const SPLICE_F_NONBLOCK: u32 = 2;
    pub const O_CLOEXEC: i32 = 0o2_000_000;
    pub const F_SETPIPE_SZ: i32 = 1031;
    pub const PR_SET_TIMERSLACK: i32 = 29;
}

/// How late the writer of a direction delayed by `delay` may wake: 1 % of the delay, 50 µs (Linux's default) to 1 ms.
fn timer_slack(delay: Duration) -> Duration {
    (delay / 100).clamp(Duration::from_micros(50), Duration::from_millis(1))
}

/// A kernel pipe: bytes wait in it between the two sockets without being copied into this process.
struct Pipe {
    read_end: i32,
    write_end: i32,
}

impl Pipe {
    fn new() -> std::io::Result<Pipe> {
        let mut ends = [0i32; 2];
        // Safety: pipe2 writes two descriptors into the array it is given.
        if unsafe { sys::pipe2(ends.as_mut_ptr(), sys::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Safety: a plain system call on a descriptor this process owns. The kernel may refuse (the pipe keeps
        // 64 kB): the proxy then uses more pipes.
        unsafe { sys::fcntl(ends[1], sys::F_SETPIPE_SZ, PIPE_BYTES as i32) };
        Ok(Pipe { read_end: ends[0], write_end: ends[1] })
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        // Safety: the descriptors are this pipe's own and used no more.
        unsafe {
            sys::close(self.read_end);
            sys::close(self.write_end);
        }
    }
}

/// splice(2) between two descriptors with no offsets (sockets and pipes have none), retried when interrupted.
fn splice(source: i32, target: i32, len: usize, flags: u32) -> std::io::Result<usize> {
    loop {
        // Safety: null offsets; the descriptors are open for the whole call.
        let moved = unsafe { sys::splice(source, std::ptr::null_mut(), target, std::ptr::null_mut(), len, flags) };
        if moved >= 0 {
            return Ok(moved as usize);
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Waits until `from` has bytes to read (or its end). A splice from a socket into a pipe holds the pipe's lock while
/// it waits for data, which would keep the writer from emptying that pipe: so it is called only once data is there.
fn wait_readable(from: &TcpStream) -> std::io::Result<()> {
    let mut wanted = sys::PollFd { fd: from.as_raw_fd(), events: sys::POLLIN, revents: 0 };
    loop {
        // Safety: one valid pollfd for the duration of the call.
        if unsafe { sys::poll(&mut wanted, 1, -1) } >= 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// A run of bytes waiting in a pipe, and when it may leave.
struct Run {
    due: Instant,
    pipe: Arc<Pipe>,
    len: usize,
}

/// Moves `from` to `to`, each run of bytes `delay` after it arrived; at the end shuts down the write half of `to`.
fn pump(from: TcpStream, to: TcpStream, delay: Duration) {
    if delay.is_zero() {
        pass_through(&from, &to);
        let _ = to.shutdown(Shutdown::Write);
    } else {
        delay_runs(&from, to, delay);
    }
    let _ = from.shutdown(Shutdown::Read);
}

/// Sends each run on as it arrives, through one pipe: no thread hop per run.
fn pass_through(from: &TcpStream, to: &TcpStream) {
    let pipe = match Pipe::new() {
        Ok(pipe) => pipe,
        Err(err) => return eprintln!("wanproxy: no pipe ({err}): closing the connection"),
    };
    while let Ok(len @ 1..) = splice(from.as_raw_fd(), pipe.write_end, PIPE_BYTES, sys::SPLICE_F_MOVE) {
        if !send_run(&pipe, to, len) {
            return;
        }
    }
}

/// Splices `len` bytes out of `pipe` to `to`; false when `to` is gone. (Not SPLICE_F_MORE: it corks the socket,
/// holding a partial segment back for up to 200 ms.)
fn send_run(pipe: &Pipe, to: &TcpStream, mut len: usize) -> bool {
    while len > 0 {
        match splice(pipe.read_end, to.as_raw_fd(), len, sys::SPLICE_F_MOVE) {
            Ok(0) | Err(_) => return false,
            Ok(moved) => len -= moved,
        }
    }
    true
}

/// The reader's side of a delayed direction (see the module documentation); the writer runs on its own thread.
fn delay_runs(from: &TcpStream, to: TcpStream, delay: Duration) {
    let (runs, due_runs) = channel::<Run>();
    let (emptied, empty_pipes) = channel::<Pipe>();
    let slack = timer_slack(delay);
    let writer = thread::spawn(move || {
        // Safety: sets this thread's own timer slack; no pointer is passed.
        unsafe { sys::prctl(sys::PR_SET_TIMERSLACK, slack.as_nanos() as u64, 0, 0, 0) };
        send_when_due(due_runs, to, emptied)
    });
    let mut filling: Option<Arc<Pipe>> = None;
    loop {
        let pipe = match filling.take() {
            Some(pipe) => pipe,
            None => match empty_pipes.try_recv().map_or_else(|_| Pipe::new(), Ok) {
                Ok(pipe) => Arc::new(pipe),
                Err(err) => {
                    eprintln!("wanproxy: no pipe for the bytes in flight ({err}): closing the connection");
                    break;
                }
            },
        };
        if wait_readable(from).is_err() {
            break;
        }
        match splice(from.as_raw_fd(), pipe.write_end, PIPE_BYTES, sys::SPLICE_F_MOVE | sys::SPLICE_F_NONBLOCK) {
            Ok(0) => break, // end of stream
            Ok(len) => {
                filling = Some(Arc::clone(&pipe));
                if runs.send(Run { due: Instant::now() + delay, pipe, len }).is_err() {
                    break; // the writer stopped: the other side is gone
                }
            }
            // Full: the writer hands it back once its bytes have left; go on in another.
            Err(err) if err.kind() == ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
    }
    drop(filling);
    drop(runs); // the writer sends what is left, then shuts down
    let _ = writer.join();
}

/// Splices each run out at its time; hands back each pipe that the reader left and that is now empty.
fn send_when_due(due_runs: Receiver<Run>, to: TcpStream, emptied: Sender<Pipe>) {
    for Run { due, pipe, len } in due_runs {
        let wait = due.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            thread::sleep(wait);
        }
        if !send_run(&pipe, &to, len) {
            break;
        }
        // The last owner of a pipe is the writer once the reader has moved on and every run in it has left.
        if let Ok(pipe) = Arc::try_unwrap(pipe) {
            let _ = emptied.send(pipe);
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn proxy(rtt_ms: u64) -> (SocketAddr, TcpListener) {
        let upstream = TcpListener::bind("127.0.0.1:0").expect("binds");
        let listener = TcpListener::bind("127.0.0.1:0").expect("binds");
        let (address, target) = (listener.local_addr().expect("bound"), upstream.local_addr().expect("bound"));
        thread::spawn(move || {
            for client in listener.incoming() {
                let upstream = TcpStream::connect(target).expect("connects");
                forward(client.expect("accepted"), upstream, Duration::from_millis(rtt_ms / 2));
            }
        });
        (address, upstream)
    }

    /// Sends `message` through a proxy to an echo server and back; returns what came back and how long it took.
    fn echo_through(rtt_ms: u64, message: &[u8]) -> (Vec<u8>, Duration) {
        let (address, upstream) = proxy(rtt_ms);
        thread::spawn(move || {
            let (mut server, _) = upstream.accept().expect("accepted");
            let mut received = Vec::new();
            server.read_to_end(&mut received).expect("reads");
            server.write_all(&received).expect("writes");
        });
        let mut client = TcpStream::connect(address).expect("connects");
        let started = Instant::now();
        client.write_all(message).expect("writes");
        client.shutdown(Shutdown::Write).expect("half-closes");
        let mut echoed = Vec::new();
        client.read_to_end(&mut echoed).expect("reads");
        (echoed, started.elapsed())
    }

    #[test]
    fn bytes_arrive_intact_and_in_order_after_one_round_trip() {
        // 32 MB: more than a pipe holds, so runs go through several pipes and pipes come back for reuse.
        let message: Vec<u8> = (0..32_000_000u32).map(|i| (i % 251) as u8).collect();
        let (echoed, took) = echo_through(200, &message);
        assert!(echoed == message, "{} bytes came back", echoed.len());
        assert!(took >= Duration::from_millis(200), "{took:?}: the delay is one way each, a round trip in all");
    }

    #[test]
    fn small_requests_and_answers_each_take_one_round_trip() {
        // A request/response protocol (CQL's OPTIONS → SUPPORTED): the answer must not wait for more requests.
        let (address, upstream) = proxy(100);
        thread::spawn(move || {
            let (mut server, _) = upstream.accept().expect("accepted");
            let mut request = [0u8; 9];
            while server.read_exact(&mut request).is_ok() {
                server.write_all(&request).expect("answers");
            }
        });
        let mut client = TcpStream::connect(address).expect("connects");
        client.set_read_timeout(Some(Duration::from_secs(2))).expect("timeout set");
        for round in 0..3u8 {
            let started = Instant::now();
            client.write_all(&[round; 9]).expect("writes");
            let mut answer = [0u8; 9];
            client.read_exact(&mut answer).expect("answered within 2 s");
            assert_eq!(answer, [round; 9]);
            let took = started.elapsed();
            assert!(took >= Duration::from_millis(100) && took < Duration::from_millis(400), "{took:?}");
        }
    }

    #[test]
    fn the_writer_may_wake_late_by_one_percent_of_the_delay_within_bounds() {
        assert_eq!(timer_slack(Duration::from_millis(50)), Duration::from_micros(500));
        assert_eq!(timer_slack(Duration::from_millis(1)), Duration::from_micros(50));
        assert_eq!(timer_slack(Duration::from_secs(5)), Duration::from_millis(1));
    }

    #[test]
    fn without_delay_the_proxy_only_copies() {
        let (echoed, _) = echo_through(0, b"ping");
        assert_eq!(echoed, b"ping");
    }

    #[test]
    fn only_loopback_addresses_are_served_and_the_delay_is_half_the_round_trip() {
        let parse = |args: &[&str]| parse_options(args.iter().map(|arg| arg.to_string()));
        let refused = parse(&["--listen", "0.0.0.0:9042", "--upstream", "127.0.0.1:9042"]).err().expect("refused");
        assert!(refused.contains("only loopback"), "{refused}");
        let options = parse(&["--listen", "127.0.30.1:0", "--upstream", "127.0.30.1:9042", "--rtt-ms", "100"])
            .expect("valid");
        assert_eq!(options.one_way, Duration::from_millis(50));
    }
}

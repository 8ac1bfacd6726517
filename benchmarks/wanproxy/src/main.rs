//! wanproxy: forwards TCP connections from a loopback address to an upstream one, delaying every byte by half a
//! round trip in each direction. Nothing else changes: no loss, no bandwidth cap, no reordering.
//!
//! Each direction of a connection has a reader thread, which stamps every chunk it reads with the time it may leave,
//! and a writer thread, which sends each chunk at its time; the chunks in between are the bytes "on the wire" (a
//! long link holds bandwidth × delay of them). With no delay one thread per direction moves the bytes with splice(2),
//! inside the kernel.
//!
//! Prints `listening on ADDRESS` (the port chosen when asked for 0) and runs until killed.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread;
use std::time::{Duration, Instant};

/// Bytes read at once: large enough that a fast stream costs few system calls.
const CHUNK: usize = 256 * 1024;

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
        // Delayed or not, a chunk leaves as soon as it may: Nagle's algorithm would hold small ones back.
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

/// Copies `from` to `to`, each chunk `delay` after it was read; at the end shuts down the write half of `to`.
fn pump(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    if delay.is_zero() {
        if splice_through_pipe(&from, &to).is_err() {
            // splice(2) unavailable: copy through a buffer.
            let mut buffer = vec![0; CHUNK];
            while let Ok(read) = read_some(&mut from, &mut buffer) {
                if read == 0 || to.write_all(&buffer[..read]).is_err() {
                    break;
                }
            }
        }
        let _ = to.shutdown(Shutdown::Write);
        return;
    }
    let (chunks, due_chunks) = channel::<(Instant, Vec<u8>)>();
    let (spent, free) = channel::<Vec<u8>>();
    let writer = thread::spawn(move || send_when_due(due_chunks, to, spent));
    loop {
        let mut buffer = free.try_recv().unwrap_or_else(|_| vec![0; CHUNK]);
        buffer.resize(CHUNK, 0);
        match read_some(&mut from, &mut buffer) {
            Ok(read) if read > 0 => {
                buffer.truncate(read);
                if chunks.send((Instant::now() + delay, buffer)).is_err() {
                    break; // the writer stopped: the other side is gone
                }
            }
            _ => break,
        }
    }
    drop(chunks); // the writer sends what is left, then shuts down
    let _ = writer.join();
    let _ = from.shutdown(Shutdown::Read);
}

/// Sends each chunk at its time; hands the emptied buffer back for reuse.
fn send_when_due(due_chunks: Receiver<(Instant, Vec<u8>)>, mut to: TcpStream, spent: Sender<Vec<u8>>) {
    for (due, buffer) in due_chunks {
        let wait = due.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            thread::sleep(wait);
        }
        if to.write_all(&buffer).is_err() {
            break;
        }
        let _ = spent.send(buffer);
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// Linux's splice(2) and pipe2(2), declared here to keep the crate free of dependencies.
mod sys {
    unsafe extern "C" {
        pub fn splice(fd_in: i32, off_in: *mut i64, fd_out: i32, off_out: *mut i64, len: usize, flags: u32) -> isize;
        pub fn pipe2(fds: *mut i32, flags: i32) -> i32;
        pub fn fcntl(fd: i32, cmd: i32, ...) -> i32;
        pub fn close(fd: i32) -> i32;
    }
    pub const SPLICE_F_MOVE: u32 = 1;
    pub const O_CLOEXEC: i32 = 0o2_000_000;
    pub const F_SETPIPE_SZ: i32 = 1031;
}

/// Moves `from` to `to` through a pipe inside the kernel (no copy into this process: at no delay the proxy then
/// costs the two sockets' work only). Ok at end of stream or when a side is gone; Err if splice cannot be used.
fn splice_through_pipe(from: &TcpStream, to: &TcpStream) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;

    let mut pipe = [0i32; 2];
    // Safety: pipe2 writes two descriptors into the array it is given.
    if unsafe { sys::pipe2(pipe.as_mut_ptr(), sys::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let [pipe_out, pipe_in] = pipe;
    // A larger pipe moves more per call (the kernel may refuse: 64 kB then).
    // Safety: plain system calls on descriptors this function owns or borrows.
    unsafe { sys::fcntl(pipe_in, sys::F_SETPIPE_SZ, CHUNK as i32) };
    // Not SPLICE_F_MORE: it corks the socket, holding a partial segment back for up to 200 ms.
    let flags = sys::SPLICE_F_MOVE;
    let splice = |source: i32, target: i32, len: usize| loop {
        // Safety: null offsets (sockets and pipes have none).
        let moved = unsafe { sys::splice(source, std::ptr::null_mut(), target, std::ptr::null_mut(), len, flags) };
        if moved >= 0 {
            return Ok(moved as usize);
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != ErrorKind::Interrupted {
            return Err(err);
        }
    };
    let outcome = (|| {
        let mut first = true;
        loop {
            let mut waiting = match splice(from.as_raw_fd(), pipe_in, CHUNK) {
                Ok(0) => return Ok(()),
                Ok(moved) => moved,
                Err(err) if first => return Err(err), // never worked: let the caller copy instead
                Err(_) => return Ok(()),
            };
            first = false;
            while waiting > 0 {
                match splice(pipe_out, to.as_raw_fd(), waiting) {
                    Ok(0) | Err(_) => return Ok(()),
                    Ok(moved) => waiting -= moved,
                }
            }
        }
    })();
    // Safety: the pipe's descriptors are this function's and used no more.
    unsafe {
        sys::close(pipe_in);
        sys::close(pipe_out);
    }
    outcome
}

/// One read, retried when interrupted by a signal.
fn read_some(from: &mut TcpStream, buffer: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match from.read(buffer) {
            Err(err) if err.kind() == ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let message: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let (echoed, took) = echo_through(200, &message);
        assert!(echoed == message, "{} bytes came back", echoed.len());
        assert!(took >= Duration::from_millis(200), "{took:?}: the delay is one way each, a round trip in all");
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

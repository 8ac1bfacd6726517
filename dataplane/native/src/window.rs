//! How many bytes a data path keeps in flight: an adaptive window shared by the loader's fetcher and the ingest
//! writer.
//!
//! The window is measured, not configured. Each completed request gives a round-trip time (sent → answered) and
//! its bytes; once per round (about one round trip) the bytes delivered in that round give a delivery rate. While the
//! window was what held requests back:
//! - the window doubles as long as the rate rises by a quarter a round (start-up: a long link opens in a few round
//!   trips), then grows by a quarter while the rate still rises, and probes upward now and then;
//! - when the rate stopped rising and the round trip has grown well above the least seen (requests queue at the node
//!   rather than travel), it shrinks by a sixth.
//!
//! It never goes below `floor` (what the node needs to keep its read threads busy on a short link) nor above
//! `ceiling` (the memory bound). Requests bigger than the floor count as the floor, so one always fits.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore};

/// Rounds whose rates the "best recent rate" covers (so that it follows a link that changes).
const RATE_HISTORY: usize = 10;
/// A round lasts at least this long: shorter ones count too few requests for a stable rate.
const MIN_ROUND: Duration = Duration::from_millis(40);
/// The rate rose if it beat the best recent rate by this factor: in start-up, then in steady state.
const STARTUP_GROWTH: f64 = 1.25;
const STEADY_GROWTH: f64 = 1.05;
/// Start-up ends after this many rounds without growth.
const STARTUP_FLAT_ROUNDS: u32 = 3;
/// In steady state, every this many flat rounds the window tries a quarter more.
const PROBE_EVERY: u32 = 8;
/// Queueing: the smoothed round trip above `QUEUEING_FACTOR` × the least one plus `QUEUEING_SLACK`.
const QUEUEING_FACTOR: f64 = 1.5;
const QUEUEING_SLACK: Duration = Duration::from_millis(5);

/// The window's sizing rule, fed with completions and a clock; pure (see the module documentation).
#[derive(Debug)]
pub(crate) struct WindowControl {
    window: usize,
    floor: usize,
    ceiling: usize,
    startup: bool,
    flat_rounds: u32,
    round_start: Instant,
    round_bytes: usize,
    /// Some request of this round waited for the window (else the rate says nothing about the window).
    round_limited: bool,
    rates: VecDeque<f64>,
    /// The least round trip seen: the link without queues. Never forgotten: taking a later, queued one as the least
    /// would let the queue grow again (a too low one only makes the window shrink to its floor sooner).
    min_rtt: Option<Duration>,
    srtt: Option<Duration>,
}

impl WindowControl {
    /// Starts at `initial` bytes, kept within [`floor`, `ceiling`].
    pub(crate) fn new(initial: usize, floor: usize, ceiling: usize, now: Instant) -> Self {
        let ceiling = ceiling.max(floor);
        Self {
            window: initial.clamp(floor, ceiling),
            floor,
            ceiling,
            startup: true,
            flat_rounds: 0,
            round_start: now,
            round_bytes: 0,
            round_limited: false,
            rates: VecDeque::with_capacity(RATE_HISTORY),
            min_rtt: None,
            srtt: None,
        }
    }

    pub(crate) fn window(&self) -> usize {
        self.window
    }

    pub(crate) fn floor(&self) -> usize {
        self.floor
    }

    pub(crate) fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    pub(crate) fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// A request had to wait for the window.
    pub(crate) fn limited(&mut self) {
        self.round_limited = true;
    }

    /// A request of `bytes` completed after `rtt`; may resize the window (see `window`).
    pub(crate) fn delivered(&mut self, bytes: usize, rtt: Duration, now: Instant) {
        self.round_bytes += bytes;
        self.min_rtt = Some(self.min_rtt.map_or(rtt, |least| least.min(rtt)));
        // Smoothed as TCP does (RFC 6298): an eighth of each new sample.
        self.srtt = Some(self.srtt.map_or(rtt, |srtt| srtt.mul_f64(0.875) + rtt.mul_f64(0.125)));
        let round = self.srtt.unwrap_or(rtt).max(MIN_ROUND);
        let elapsed = now.duration_since(self.round_start);
        if elapsed >= round {
            let rate = self.round_bytes as f64 / elapsed.as_secs_f64();
            if self.round_limited {
                self.end_round(rate);
            }
            self.round_start = now;
            self.round_bytes = 0;
            self.round_limited = false;
        }
    }

    fn end_round(&mut self, rate: f64) {
        let best = self.rates.iter().copied().fold(0.0, f64::max);
        let growth = if self.startup { STARTUP_GROWTH } else { STEADY_GROWTH };
        if self.rates.len() == RATE_HISTORY {
            self.rates.pop_front();
        }
        self.rates.push_back(rate);
        if rate > best * growth {
            self.flat_rounds = 0;
            self.resize(if self.startup { 2.0 } else { 1.25 });
            return;
        }
        self.flat_rounds += 1;
        if self.startup {
            if self.flat_rounds >= STARTUP_FLAT_ROUNDS {
                self.startup = false;
                self.flat_rounds = 0;
            }
        } else if self.queueing() {
            self.resize(5.0 / 6.0);
        } else if self.flat_rounds.is_multiple_of(PROBE_EVERY) {
            self.resize(1.25);
        }
    }

    fn queueing(&self) -> bool {
        match (self.srtt, self.min_rtt()) {
            (Some(srtt), Some(least)) => srtt > least.mul_f64(QUEUEING_FACTOR) + QUEUEING_SLACK,
            _ => false,
        }
    }

    fn resize(&mut self, factor: f64) {
        self.window = ((self.window as f64 * factor) as usize).clamp(self.floor, self.ceiling);
    }
}

/// Bytes are counted in units of this many (the semaphore's permits).
const UNIT: usize = 4096;

/// The window as requests see it: `acquire` waits (in order of arrival) until a request's bytes fit, the permit's
/// `delivered` reports its completion. Shared by the requests of one fetcher or writer.
pub(crate) struct FlowWindow {
    permits: Semaphore,
    state: Mutex<FlowState>,
    idle: Notify,
}

struct FlowState {
    control: WindowControl,
    /// Units the semaphore holds in all (granted and available), less `debt`: the window in units.
    issued_units: usize,
    /// Units to take back from returning permits after a shrink that found too few available.
    debt: usize,
    in_flight_bytes: usize,
    in_flight_requests: usize,
    peak_in_flight_bytes: usize,
}

/// What a window looks like now (for stats).
pub(crate) struct WindowStats {
    pub window_bytes: usize,
    pub in_flight_bytes: usize,
    pub peak_in_flight_bytes: usize,
    pub min_rtt: Option<Duration>,
    pub srtt: Option<Duration>,
}

impl FlowWindow {
    pub(crate) fn new(control: WindowControl) -> Arc<Self> {
        let units = control.window().div_ceil(UNIT);
        Arc::new(Self {
            permits: Semaphore::new(units),
            state: Mutex::new(FlowState {
                control,
                issued_units: units,
                debt: 0,
                in_flight_bytes: 0,
                in_flight_requests: 0,
                peak_in_flight_bytes: 0,
            }),
            idle: Notify::new(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FlowState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until `bytes` fit in the window (behind the requests already waiting).
    pub(crate) async fn acquire(self: &Arc<Self>, bytes: usize) -> FlowPermit {
        let units = {
            let state = self.state();
            bytes.div_ceil(UNIT).clamp(1, state.control.floor().div_ceil(UNIT))
        };
        let permit = match self.permits.try_acquire_many(units as u32) {
            Ok(permit) => permit,
            Err(_) => {
                self.state().control.limited();
                self.permits.acquire_many(units as u32).await.expect("never closed")
            }
        };
        permit.forget(); // returned by the FlowPermit, less any debt
        let mut state = self.state();
        state.in_flight_bytes += bytes;
        state.in_flight_requests += 1;
        state.peak_in_flight_bytes = state.peak_in_flight_bytes.max(state.in_flight_bytes);
        FlowPermit {
            window: Arc::clone(self),
            units,
            bytes,
            sent: Instant::now(),
            delivered: None,
        }
    }

    /// Waits until no request is in flight.
    pub(crate) async fn wait_idle(&self) {
        loop {
            let idle = self.idle.notified();
            if self.state().in_flight_requests == 0 {
                return;
            }
            idle.await;
        }
    }

    pub(crate) fn stats(&self) -> WindowStats {
        let state = self.state();
        WindowStats {
            window_bytes: state.control.window(),
            in_flight_bytes: state.in_flight_bytes,
            peak_in_flight_bytes: state.peak_in_flight_bytes,
            min_rtt: state.control.min_rtt(),
            srtt: state.control.srtt(),
        }
    }

    pub(crate) fn window_bytes(&self) -> usize {
        self.state().control.window()
    }

    fn release(&self, units: usize, bytes: usize, delivered: Option<(usize, Duration)>) {
        let mut state = self.state();
        state.in_flight_bytes -= bytes;
        state.in_flight_requests -= 1;
        if let Some((delivered_bytes, rtt)) = delivered {
            state.control.delivered(delivered_bytes, rtt, Instant::now());
        }
        let wanted = state.control.window().div_ceil(UNIT);
        let mut returned = units;
        if wanted > state.issued_units {
            returned += wanted - state.issued_units;
        } else {
            let shrink = state.issued_units - wanted;
            let taken_now = self.permits.forget_permits(shrink);
            state.debt += shrink - taken_now;
        }
        state.issued_units = wanted;
        let repaid = returned.min(state.debt);
        state.debt -= repaid;
        let idle = state.in_flight_requests == 0;
        drop(state);
        self.permits.add_permits(returned - repaid);
        if idle {
            self.idle.notify_waiters();
        }
    }
}

/// Room for one request in a `FlowWindow`; gives it back when dropped.
pub(crate) struct FlowPermit {
    window: Arc<FlowWindow>,
    units: usize,
    bytes: usize,
    sent: Instant,
    delivered: Option<usize>,
}

impl FlowPermit {
    /// The request completed with `bytes` of payload: a sample for the window (a failed request gives none).
    pub(crate) fn delivered(&mut self, bytes: usize) {
        self.delivered = Some(bytes);
    }
}

impl Drop for FlowPermit {
    fn drop(&mut self) {
        let sample = self.delivered.map(|bytes| (bytes, self.sent.elapsed()));
        self.window.release(self.units, self.bytes, sample);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    /// A link of `rtt` and `bandwidth` bytes/s in front of a node: a window below the bandwidth-delay product
    /// delivers window/rtt, above it the excess queues (the round trip grows by queue/bandwidth). Runs `seconds` of
    /// requests of `request` bytes with the window always full; returns the control and the last round's rate.
    fn simulate(control: &mut WindowControl, rtt: Duration, bandwidth: f64, seconds: f64, start: Instant) -> f64 {
        let request = 512 * 1024;
        let step = Duration::from_millis(5);
        let mut now = start;
        let mut rate = 0.0;
        while now.duration_since(start).as_secs_f64() < seconds {
            let window = control.window() as f64;
            let bdp = bandwidth * rtt.as_secs_f64();
            rate = (window / rtt.as_secs_f64()).min(bandwidth);
            let seen_rtt = rtt + Duration::from_secs_f64((window - bdp).max(0.0) / bandwidth);
            let completions = ((rate * step.as_secs_f64()) / request as f64).round().max(1.0) as usize;
            now += step;
            for _ in 0..completions {
                control.limited();
                control.delivered(request, seen_rtt, now);
            }
        }
        rate
    }

    #[test]
    fn a_long_link_opens_to_its_bandwidth_delay_product_within_a_few_seconds() {
        let start = Instant::now();
        let mut control = WindowControl::new(4 * MIB, 2 * MIB, 256 * MIB, start);
        // 200 MB/s at 100 ms: 20 MB in flight are needed.
        let rate = simulate(&mut control, Duration::from_millis(100), 200e6, 3.0, start);
        assert!(control.window() >= 20_000_000, "window {} B", control.window());
        assert!(rate >= 0.95 * 200e6, "rate {rate}");
    }

    #[test]
    fn a_node_that_slows_down_makes_requests_queue_and_the_window_shrink() {
        let start = Instant::now();
        let mut control = WindowControl::new(4 * MIB, 2 * MIB, 256 * MIB, start);
        let rtt = Duration::from_millis(100);
        simulate(&mut control, rtt, 200e6, 3.0, start);
        let opened = control.window();
        // Now 50 MB/s: 5 MB in flight are enough, more only queues at the node.
        let rate = simulate(&mut control, rtt, 50e6, 20.0, start + Duration::from_secs(3));
        assert!(control.window() < opened / 2 && control.window() < 12_000_000, "{opened} → {} B", control.window());
        assert!(rate >= 0.95 * 50e6, "rate {rate}");
    }

    #[test]
    fn the_window_stays_within_floor_and_ceiling() {
        let start = Instant::now();
        let mut control = WindowControl::new(4 * MIB, 2 * MIB, 8 * MIB, start);
        simulate(&mut control, Duration::from_millis(200), 1e9, 5.0, start);
        assert_eq!(control.window(), 8 * MIB, "a link that wants more gets the ceiling");
        let mut control = WindowControl::new(4 * MIB, 2 * MIB, 8 * MIB, start);
        simulate(&mut control, Duration::from_millis(1), 10e6, 30.0, start);
        assert!(control.window() >= 2 * MIB);
    }

    #[test]
    fn rounds_where_the_window_held_nothing_back_change_nothing() {
        let start = Instant::now();
        let mut control = WindowControl::new(4 * MIB, 2 * MIB, 64 * MIB, start);
        for step in 1..200u64 {
            // Fast deliveries, but never limited by the window: the application asked for little.
            control.delivered(MIB, Duration::from_millis(50), start + Duration::from_millis(step * 10));
        }
        assert_eq!(control.window(), 4 * MIB);
        assert_eq!(control.min_rtt(), Some(Duration::from_millis(50)));
    }

    #[test]
    fn permits_wait_for_room_and_in_order_and_idle_is_reached() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("a runtime");
        runtime.block_on(async {
            let window = FlowWindow::new(WindowControl::new(8 * UNIT, 8 * UNIT, 8 * UNIT, Instant::now()));
            let mut first = window.acquire(6 * UNIT).await;
            let waiting = tokio::spawn({
                let window = Arc::clone(&window);
                async move { window.acquire(4 * UNIT).await }
            });
            tokio::task::yield_now().await;
            assert!(!waiting.is_finished(), "6 + 4 units exceed the window of 8");
            assert_eq!(window.stats().in_flight_bytes, 6 * UNIT);
            first.delivered(6 * UNIT);
            drop(first);
            let second = waiting.await.expect("the task ran");
            assert_eq!(window.stats().in_flight_bytes, 4 * UNIT);
            assert_eq!(window.stats().peak_in_flight_bytes, 6 * UNIT);
            drop(second);
            tokio::time::timeout(Duration::from_secs(1), window.wait_idle()).await.expect("idle");
            // A request larger than the floor counts as the floor, so it never waits forever.
            drop(window.acquire(100 * UNIT).await);
        });
    }
}

//! The connection budget: how many connections may be open, and how many webhook requests may be in flight
//! (being read or decided), in all, per source address and per strategy. Over a connection cap a new connection is closed
//! at once, before its TLS handshake (no descriptor is kept and no handshake CPU is spent); over an in-flight
//! cap a request is answered 503 with `Retry-After` before its body is read. Together with the timeouts this
//! bounds both the descriptors and the memory that anyone can make the process hold.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// The caps (see `docs/server.md` for the defaults and their flags).
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    /// Open connections in all.
    pub connections: u32,
    /// Open connections from one address.
    pub connections_per_address: u32,
    /// Requests in flight in all.
    pub in_flight: u32,
    /// Requests in flight from one address.
    pub in_flight_per_address: u32,
    /// Requests in flight for one strategy (its webhook). A strategy's senders can never use more than its
    /// rate limit's worth of decisions at once, so the server sets this to the rate limit: whoever holds one
    /// strategy's token (a leaked token, or one user of a shared host), sending bodies that never finish from
    /// many addresses, cannot take every slot and have every other strategy's alerts answered 503.
    pub in_flight_per_strategy: u32,
}

/// A source address as the caps count it: IPv4 addresses one by one, IPv6 by `/64` (one host usually holds a
/// whole `/64`, so counting single IPv6 addresses would cap nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// An IPv4 address (also when it arrived IPv4-mapped on an IPv6 socket).
    V4(u32),
    /// The first 64 bits of an IPv6 address.
    V6(u64),
}

impl From<IpAddr> for Source {
    fn from(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(v4) => Source::V4(u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source::V4(u32::from(v4)),
                None => Source::V6((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

#[derive(Default)]
struct Counts {
    connections: u32,
    in_flight: u32,
    by_source: HashMap<Source, (u32, u32)>,
    by_strategy: HashMap<Arc<str>, u32>,
}

/// Counts connections and requests against the [`Caps`]. Permits give their slot back when dropped.
pub struct Budget {
    caps: Caps,
    counts: Mutex<Counts>,
}

impl Budget {
    /// A budget enforcing `caps`.
    pub fn new(caps: Caps) -> Arc<Budget> {
        Arc::new(Budget { caps, counts: Mutex::default() })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for a new connection from `ip`, or `None` when a cap is reached (close it at once).
    pub fn connection(self: &Arc<Self>, ip: IpAddr) -> Option<Permit> {
        let source = Source::from(ip);
        let mut c = self.lock();
        let from_source = c.by_source.get(&source).map_or(0, |s| s.0);
        if c.connections >= self.caps.connections || from_source >= self.caps.connections_per_address {
            return None;
        }
        c.connections += 1;
        c.by_source.entry(source).or_default().0 += 1;
        Some(Permit { budget: Arc::clone(self), source, kind: Kind::Connection })
    }

    /// A slot for a request in flight from `ip` for `strategy`, or which cap is reached.
    pub fn request(self: &Arc<Self>, ip: IpAddr, strategy: &Arc<str>) -> Result<Permit, Full> {
        let source = Source::from(ip);
        let mut c = self.lock();
        let from_source = c.by_source.get(&source).map_or(0, |s| s.1);
        let for_strategy = c.by_strategy.get(&**strategy).copied().unwrap_or(0);
        if for_strategy >= self.caps.in_flight_per_strategy {
            return Err(Full::Strategy);
        }
        if c.in_flight >= self.caps.in_flight || from_source >= self.caps.in_flight_per_address {
            return Err(Full::Server);
        }
        c.in_flight += 1;
        c.by_source.entry(source).or_default().1 += 1;
        *c.by_strategy.entry(Arc::clone(strategy)).or_default() += 1;
        Ok(Permit { budget: Arc::clone(self), source, kind: Kind::Request(Arc::clone(strategy)) })
    }

    /// Open connections and requests in flight now.
    pub fn in_use(&self) -> (u32, u32) {
        let c = self.lock();
        (c.connections, c.in_flight)
    }
}

/// Which in-flight cap turned a request away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// The strategy has its rate limit's worth of requests in flight: decided, they fill its window, so the
    /// request is answered as one over the rate limit (429).
    Strategy,
    /// The server's, or the address's, cap: answered 503 busy.
    Server,
}

#[derive(Debug, Clone)]
enum Kind {
    Connection,
    /// A request for this strategy.
    Request(Arc<str>),
}

/// One connection's or request's slot in the [`Budget`], given back on drop.
pub struct Permit {
    budget: Arc<Budget>,
    source: Source,
    kind: Kind,
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut c = self.budget.lock();
        if let Some(s) = c.by_source.get_mut(&self.source) {
            match self.kind {
                Kind::Connection => s.0 = s.0.saturating_sub(1),
                Kind::Request(_) => s.1 = s.1.saturating_sub(1),
            }
            if *s == (0, 0) {
                c.by_source.remove(&self.source);
            }
        }
        match &self.kind {
            Kind::Connection => c.connections = c.connections.saturating_sub(1),
            Kind::Request(strategy) => {
                c.in_flight = c.in_flight.saturating_sub(1);
                if let Some(n) = c.by_strategy.get_mut(&**strategy) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        c.by_strategy.remove(&**strategy);
                    }
                }
            }
        }
    }
}

/// The admin listener's connection cap (and its per-address cap: on loopback every local process shares one
/// address). An operator's browser opens a few; its connections use the same descriptors as everything else.
pub const ADMIN_CONNECTIONS: u32 = 32;

/// Descriptors kept back from the connection cap for what the process always has open: the listeners, the
/// embedded database and its write-ahead log, the strategies directory while it is read, the standard streams,
/// name lookups, and the brokers' connections still being made for a request that found an idle one meanwhile.
const FIXED_FILES: u64 = 128;

/// Everything the process may open besides the webhook listener's connections, and so kept back from its cap:
/// [`FIXED_FILES`], the admin listener's whole cap, the outgoing connections in flight (the dispatcher's
/// deliveries, [`crate::dispatch::CONCURRENCY`] in all, each broker's [`crate::dispatch::PER_HOST`] within it,
/// and `reads` for the state sync, [`crate::sync::reads_in_flight`], with one token renewal per OAuth bot), `idle`
/// connections the brokers' pools may keep open, `receivers` for notifications being sent, and `database` (the
/// PostgreSQL pool). A fixed 128 + 32 left the outgoing
/// connections uncounted: with 150 http bots at one broker, each sync holding its own connection, both
/// listeners held full ran the process out of descriptors, and orders needing a new connection expired unsent.
pub fn reserved_files(reads: u64, idle: u64, receivers: u64, database: u64) -> u64 {
    let in_flight = (crate::dispatch::CONCURRENCY as u64).saturating_add(reads);
    FIXED_FILES
        .saturating_add(u64::from(ADMIN_CONNECTIONS))
        .saturating_add(in_flight)
        .saturating_add(idle)
        .saturating_add(receivers)
        .saturating_add(database)
}

/// Raises the soft open-file limit to the hard limit (the soft one is often 1,024 while the hard one is far
/// higher) and logs both. Returns the limit now in force, `None` when it cannot be read.
pub fn raise_open_files() -> Option<u64> {
    let Some((soft, hard)) = open_files_limit() else {
        tracing::warn!("cannot read the open-file limit; the connection cap is left as it is");
        return None;
    };
    let now = if soft < hard { set_open_files_limit(hard, hard).map_or(soft, |()| hard) } else { soft };
    tracing::info!(soft_before = soft, hard, soft_now = now, "open-file limit");
    Some(now)
}

/// The connection cap that fits under the open-file limit `open_files` with `reserved` descriptors kept back
/// ([`reserved_files`]): `wanted`, or fewer so that the process cannot run out of descriptors ("accept failed:
/// Too many open files"). An unknown limit leaves `wanted` as it is.
pub fn connection_cap(wanted: u32, open_files: Option<u64>, reserved: u64) -> u32 {
    let Some(limit) = open_files else { return wanted };
    let fit = limit.saturating_sub(reserved).max(16);
    let cap = u64::from(wanted).min(fit) as u32;
    tracing::info!(open_files = limit, reserved, max_connections = cap, "connection cap");
    if cap < wanted {
        tracing::warn!(wanted, cap, "the open-file limit lowers the connection cap (raise the hard limit: ulimit -Hn)");
    }
    cap
}

/// The soft and hard `RLIMIT_NOFILE`.
// `rlim_t` is u64 on Linux but not on every Unix.
#[allow(clippy::unnecessary_cast)]
pub fn open_files_limit() -> Option<(u64, u64)> {
    let mut l = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we own and reads nothing else.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) };
    (rc == 0).then_some((l.rlim_cur as u64, l.rlim_max as u64))
}

fn set_open_files_limit(soft: u64, hard: u64) -> Option<()> {
    let l = libc::rlimit { rlim_cur: soft as libc::rlim_t, rlim_max: hard as libc::rlim_t };
    // SAFETY: setrlimit reads the struct we own; raising the soft limit up to the hard one needs no privilege.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) };
    (rc == 0).then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps() -> Caps {
        Caps {
            connections: 3,
            connections_per_address: 2,
            in_flight: 2,
            in_flight_per_address: 1,
            in_flight_per_strategy: 2,
        }
    }

    #[test]
    fn connections_are_capped_per_address_and_in_all_and_slots_come_back() {
        let b = Budget::new(caps());
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        let p1 = b.connection(a).unwrap();
        let _p2 = b.connection(a).unwrap();
        assert!(b.connection(a).is_none(), "per-address cap");
        let _p3 = b.connection(other).unwrap();
        assert!(b.connection("192.0.2.3".parse().unwrap()).is_none(), "global cap");
        drop(p1);
        let _p4 = b.connection(a).expect("a closed connection gives its slot back");
        assert_eq!(b.in_use().0, 3);
    }

    #[test]
    fn requests_are_capped_apart_from_connections() {
        let b = Budget::new(caps());
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let _c = b.connection(a).unwrap();
        let r = b.request(a, &"s".into()).unwrap();
        assert_eq!(b.request(a, &"t".into()).err(), Some(Full::Server));
        let _r2 = b.request("192.0.2.9".parse().unwrap(), &"t".into()).unwrap();
        assert_eq!(b.request("192.0.2.10".parse().unwrap(), &"u".into()).err(), Some(Full::Server));
        drop(r);
        assert!(b.request(a, &"s".into()).is_ok());
    }

    /// One strategy's requests, from as many addresses as its sender likes, take at most its share of the
    /// slots: another strategy's alert still finds one.
    #[test]
    fn requests_are_capped_per_strategy_and_slots_come_back() {
        let b = Budget::new(Caps { in_flight: 4, in_flight_per_address: 4, in_flight_per_strategy: 2, ..caps() });
        let ip = |n: u8| IpAddr::from([192, 0, 2, n]);
        let first = b.request(ip(1), &"a".into()).unwrap();
        let _second = b.request(ip(2), &"a".into()).unwrap();
        assert_eq!(b.request(ip(3), &"a".into()).err(), Some(Full::Strategy), "a third slot for strategy a");
        let _other = b.request(ip(3), &"b".into()).expect("strategy b is served");
        drop(first);
        let _again = b.request(ip(4), &"a".into()).expect("a finished request gives its strategy's slot back");
        assert_eq!(b.in_use().1, 3);
    }

    #[test]
    fn ipv6_counts_by_slash_64_and_mapped_ipv4_as_ipv4() {
        let x: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let y: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let z: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(Source::from(x), Source::from(y));
        assert_ne!(Source::from(x), Source::from(z));
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(Source::from(mapped), Source::from("192.0.2.1".parse::<IpAddr>().unwrap()));
    }

    /// The outgoing connections and the database pool are kept back from the cap with the fixed part: a fixed
    /// reserve left 150 http bots' connections to a broker uncounted.
    #[test]
    fn the_cap_keeps_back_outgoing_connections_and_the_database_pool() {
        let bare = reserved_files(0, 0, 0, 0);
        assert!(bare >= 128 + u64::from(ADMIN_CONNECTIONS) + 32, "{bare}");
        assert_eq!(reserved_files(16, 8, 2, 16), bare + 16 + 8 + 2 + 16);
        assert_eq!(connection_cap(4096, Some(1024), reserved_files(8, 8, 0, 0)), (1024 - bare - 16) as u32);
        assert_eq!(connection_cap(100, Some(1024), bare), 100, "a cap under the limit is kept");
        assert_eq!(connection_cap(4096, Some(100), bare), 16, "never under 16");
        assert_eq!(connection_cap(4096, None, bare), 4096);
    }

    #[test]
    fn the_open_file_limit_is_readable() {
        let (soft, hard) = open_files_limit().unwrap();
        assert!(soft <= hard && soft > 0);
    }
}

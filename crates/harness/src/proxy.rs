//! A delaying TCP proxy in front of one server (there is no `tc netem` on the test
//! kernels): the server advertises the proxy's address, so clients, the coordinator
//! and the other servers all reach it through the proxy. Every chunk of bytes read
//! from either side is delivered to the other after `delay + random(0..jitter)`;
//! chunks of one connection keep their order (TCP does), so jitter shows as
//! reordering *across* connections and as late, bunched-up answers on one.
//!
//! With network namespaces the proxy runs inside the server's namespace (its
//! threads enter it before binding), so partition rules still see the peers' own
//! addresses.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use rand::Rng;

use crate::HarnessError;

/// Bytes read from a socket at a time.
const CHUNK_BYTES: usize = 64 * 1024;

#[derive(Default)]
struct Setting {
    delay_us: AtomicU64,
    jitter_us: AtomicU64,
    stop: AtomicBool,
}

/// A running proxy; stops accepting when dropped (open connections end with
/// their peers).
pub struct DelayProxy {
    listen: String,
    setting: Arc<Setting>,
}

impl DelayProxy {
    /// Listens on `listen` (inside namespace `netns` when given) and forwards each
    /// connection to `target`. Port 0 picks a free port at bind time (no race with
    /// other tests for a port chosen earlier); [`DelayProxy::addr`] tells which.
    pub fn start(
        listen: &str,
        target: &str,
        netns: Option<&str>,
    ) -> Result<DelayProxy, HarnessError> {
        let setting = Arc::new(Setting::default());
        let (tx, rx) = mpsc::channel();
        let (listen_s, target, netns) = (
            listen.to_string(),
            target.to_string(),
            netns.map(str::to_string),
        );
        let s = setting.clone();
        thread::spawn(move || {
            let bound = crate::workload::enter_netns(netns.as_deref()).and_then(|()| {
                TcpListener::bind(&listen_s)
                    .map_err(|e| HarnessError::Io(format!("proxy bind {listen_s}: {e}")))
            });
            let listener = match bound {
                Ok(l) => match l.local_addr() {
                    Ok(bound_addr) => {
                        let _ = tx.send(Ok(bound_addr.to_string()));
                        l
                    }
                    Err(e) => {
                        let _ = tx.send(Err(HarnessError::Io(format!(
                            "proxy local address {listen_s}: {e}"
                        ))));
                        return;
                    }
                },
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            };
            for conn in listener.incoming() {
                if s.stop.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(client) = conn else { continue };
                let Ok(server) = TcpStream::connect(&target) else {
                    // The server is down (killed): refuse like it would.
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                pipe(&client, &server, s.clone());
                pipe(&server, &client, s.clone());
            }
        });
        let listen = rx
            .recv()
            .map_err(|_| HarnessError::Io("proxy thread ended".into()))??;
        Ok(DelayProxy { listen, setting })
    }

    /// The address it listens on (the bound port when started on port 0).
    pub fn addr(&self) -> &str {
        &self.listen
    }

    /// Delays every chunk by `delay` plus up to `jitter` from now on.
    pub fn set_delay(&self, delay: Duration, jitter: Duration) {
        let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.setting.delay_us.store(us(delay), Ordering::Relaxed);
        self.setting.jitter_us.store(us(jitter), Ordering::Relaxed);
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.setting.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag (it may be in another
        // namespace, where this connect fails harmlessly).
        let _ = TcpStream::connect_timeout(
            &match self.listen.parse() {
                Ok(a) => a,
                Err(_) => return,
            },
            Duration::from_millis(100),
        );
    }
}

/// Copies `from` to `to` with the delay: a reader thread stamps each chunk with
/// its delivery time, a writer thread delivers in order.
fn pipe(from: &TcpStream, to: &TcpStream, setting: Arc<Setting>) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
    let reader_setting = setting.clone();
    thread::spawn(move || {
        let mut buf = vec![0u8; CHUNK_BYTES];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let delay = reader_setting.delay_us.load(Ordering::Relaxed);
            let jitter = reader_setting.jitter_us.load(Ordering::Relaxed);
            let extra = if jitter > 0 {
                rand::thread_rng().gen_range(0..=jitter)
            } else {
                0
            };
            let at = Instant::now() + Duration::from_micros(delay.saturating_add(extra));
            if tx.send((at, buf[..n].to_vec())).is_err() {
                break;
            }
        }
        let _ = from.shutdown(Shutdown::Read);
    });
    thread::spawn(move || {
        for (at, bytes) in rx {
            let now = Instant::now();
            if at > now {
                thread::sleep(at - now);
            }
            if to.write_all(&bytes).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
        drop(setting);
    });
}

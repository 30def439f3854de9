//! A TCP proxy the test can cut and heal: a network partition with both sides running. Cut
//! ([`Proxy::cut`]), every connection through it is closed and new ones are closed as soon as
//! they are accepted. Silenced ([`Proxy::silence`]), nothing is closed: every byte either side
//! sends is dropped and new connections are accepted but never answered, as on a partition
//! that drops frames (no RST, no FIN), where only a peer's own keep-alive notices. The cluster
//! tests put one between a legio node and its nats-server, and
//! [`NatsCluster::start_partitionable`](crate::nats::NatsCluster::start_partitionable) one in
//! front of a nats-server's route port, the only way the other servers reach it.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The proxy: connections accepted on `port` go to the server at `target`.
#[derive(Debug)]
pub struct Proxy {
    pub port: u16,
    cut: Arc<AtomicBool>,
    silent: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
    live: Arc<AtomicUsize>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `target` (`127.0.0.1:PORT`).
    pub fn start(target: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let silent = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let live = Arc::new(AtomicUsize::new(0));
        let (cut2, silent2, open2, live2) = (
            Arc::clone(&cut),
            Arc::clone(&silent),
            Arc::clone(&open),
            Arc::clone(&live),
        );
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if cut2.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                if silent2.load(Ordering::SeqCst) {
                    // Accepted, never answered: the client waits for the server's greeting.
                    open2.lock().unwrap().push(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut open = open2.lock().unwrap();
                    open.push(client.try_clone().unwrap());
                    open.push(server.try_clone().unwrap());
                }
                live2.fetch_add(1, Ordering::SeqCst);
                let ends = Some(Arc::clone(&live2));
                pump(
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    &silent2,
                    ends,
                );
                pump(server, client, &silent2, None);
            }
        });
        Self {
            port,
            cut,
            silent,
            open,
            live,
        }
    }

    /// The URL a NATS client connects to.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// How many connections through the proxy neither side has closed yet.
    pub fn live_connections(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    /// Partitions: closes every connection through the proxy and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for stream in self.open.lock().unwrap().drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Partitions silently: closes nothing, drops every byte from then on, answers no new
    /// connection.
    pub fn silence(&self) {
        self.silent.store(true, Ordering::SeqCst);
    }

    /// Heals: new connections go through again. Connections a silence dropped bytes of are
    /// closed (their streams lost data in the middle).
    pub fn heal(&self) {
        if self.silent.swap(false, Ordering::SeqCst) {
            for stream in self.open.lock().unwrap().drain(..) {
                let _ = stream.shutdown(Shutdown::Both);
            }
        }
        self.cut.store(false, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` on a thread until either side closes; while `silent`, what is read is
/// dropped. `ends` is counted down when it stops.
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    silent: &Arc<AtomicBool>,
    ends: Option<Arc<AtomicUsize>>,
) {
    let silent = Arc::clone(silent);
    std::thread::spawn(move || {
        let mut buffer = [0u8; 64 * 1024];
        loop {
            match from.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(_) if silent.load(Ordering::SeqCst) => {}
                Ok(n) => {
                    if to.write_all(&buffer[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
        if let Some(ends) = ends {
            ends.fetch_sub(1, Ordering::SeqCst);
        }
    });
}

//! A member that answers late: a TCP proxy on loopback that delays every byte from a server
//! to its clients.
//!
//! Each chunk the proxy reads from the server at time `t` is written to the client at
//! `t + delay`, in order: a pipeline, not a sleep per request, so the delay adds latency but
//! does not limit throughput (bytes in flight are buffered). Bytes from the client go to the
//! server at once. The proxy works at the TCP level, so TLS passes through untouched and the
//! cluster's certificate (IP SAN `127.0.0.1`) still verifies. It is a user-space delay in the
//! response direction, equivalent to a one-way network delay of that size (a round trip takes
//! `delay` longer), not a netns/netem link: no loss, no bandwidth limit, no jitter.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::Error;

/// A loopback TCP proxy in front of `target` that delays the server's bytes (see the module
/// documentation). Stops, closing every connection, when dropped.
pub struct DelayProxy {
    addr: SocketAddr,
    target: SocketAddr,
    delay_ns: Arc<AtomicU64>,
    stop: CancellationToken,
    thread: Option<JoinHandle<()>>,
}

/// Size of one read from the server: a chunk is forwarded as soon as it is due, whatever
/// its size.
const CHUNK: usize = 64 * 1024;

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl DelayProxy {
    /// Listens on a free loopback port and forwards every connection to `target`, delaying
    /// the bytes that come back by `delay`. Runs on its own thread and tokio runtime, so it
    /// works whether or not the caller is inside a runtime.
    pub fn start(target: SocketAddr, delay: Duration) -> Result<Self, Error> {
        let io = |what: &str| {
            let what = what.to_string();
            move |source| Error::Io { what, source }
        };
        let listener = TcpListener::bind("127.0.0.1:0").map_err(io("binding the delay proxy"))?;
        listener
            .set_nonblocking(true)
            .map_err(io("configuring the delay proxy"))?;
        let addr = listener
            .local_addr()
            .map_err(io("configuring the delay proxy"))?;
        let delay_ns = Arc::new(AtomicU64::new(nanos(delay)));
        let stop = CancellationToken::new();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(io("building the delay proxy's runtime"))?;
        let thread = {
            let (delay_ns, stop) = (delay_ns.clone(), stop.clone());
            std::thread::Builder::new()
                .name(format!("delay-proxy-{}", addr.port()))
                .spawn(move || {
                    runtime.block_on(async move {
                        let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                            return;
                        };
                        loop {
                            let accepted = tokio::select! {
                                () = stop.cancelled() => return,
                                accepted = listener.accept() => accepted,
                            };
                            if let Ok((client, _)) = accepted {
                                let conn = proxy(client, target, delay_ns.clone());
                                let stop = stop.clone();
                                tokio::spawn(async move {
                                    tokio::select! {
                                        () = stop.cancelled() => {}
                                        _ = conn => {}
                                    }
                                });
                            }
                        }
                    });
                    // Dropping the runtime here drops every connection still open.
                })
                .map_err(io("starting the delay proxy's thread"))?
        };
        Ok(Self {
            addr,
            target,
            delay_ns,
            stop,
            thread: Some(thread),
        })
    }

    /// A proxy in front of a server URL such as [`crate::Cluster::server_url`]
    /// (`https://127.0.0.1:<port>`).
    pub fn start_for_url(server_url: &str, delay: Duration) -> Result<Self, Error> {
        let target = server_url
            .split_once("://")
            .map_or(server_url, |(_, rest)| rest)
            .trim_end_matches('/');
        let target: SocketAddr = target.parse().map_err(|e| Error::Setup {
            what: format!("the delay proxy's target {server_url}"),
            message: format!("not an IP address and port: {e}"),
        })?;
        Self::start(target, delay)
    }

    /// Where the proxy listens (`127.0.0.1:<port>`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The server behind the proxy.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// `https://127.0.0.1:<port>`: a cluster's server URL through the proxy (the proxy does
    /// not look at the bytes, TLS is between client and server).
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn delay(&self) -> Duration {
        Duration::from_nanos(self.delay_ns.load(Ordering::Relaxed))
    }

    /// Changes the delay at once, for open connections too: a chunk already read is written
    /// at its read time plus the delay in force when its turn comes (bytes never overtake
    /// each other, so after a decrease a few chunks may go out later than the new delay).
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ns.store(nanos(delay), Ordering::Relaxed);
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One connection: client → server at once, server → client each chunk `delay` after it
/// was read.
async fn proxy(client: TcpStream, target: SocketAddr, delay_ns: Arc<AtomicU64>) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
    };
    // Unbounded: reading from the server never waits for the client, so the delay does not
    // throttle the stream. `None` is the server's end of stream.
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Option<Vec<u8>>)>();
    let reader = async move {
        let mut buf = vec![0u8; CHUNK];
        loop {
            let chunk = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => None,
                Ok(n) => Some(buf[..n].to_vec()),
            };
            let end = chunk.is_none();
            if tx.send((Instant::now(), chunk)).is_err() || end {
                return;
            }
        }
    };
    let writer = async move {
        while let Some((read_at, chunk)) = rx.recv().await {
            let delay = Duration::from_nanos(delay_ns.load(Ordering::Relaxed));
            tokio::time::sleep_until(read_at + delay).await;
            match chunk {
                Some(bytes) => {
                    if client_write.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
                None => break,
            }
        }
        let _ = client_write.shutdown().await;
    };
    // Each direction ends with its side's end of stream (or an error), passing it on.
    tokio::join!(upstream, reader, writer);
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};
    use std::net::TcpListener;
    use std::time::{Duration, Instant};

    use super::DelayProxy;

    /// A server that answers a 1-byte request with 10 chunks 50 ms apart: through a 300 ms
    /// proxy the request arrives at once, the first chunk after ≥ 300 ms and the last about
    /// 300 + 450 ms after the request (a pipeline), not 10 × 300 ms; bytes arrive in order.
    #[test]
    fn delays_the_response_direction_as_a_pipeline() -> anyhow::Result<()> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let target = listener.local_addr()?;
        let server = std::thread::spawn(move || -> anyhow::Result<Instant> {
            let (mut conn, _) = listener.accept()?;
            let mut request = [0u8; 1];
            conn.read_exact(&mut request)?;
            let received = Instant::now();
            for i in 0..10u8 {
                conn.write_all(&[i; 1000])?;
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(received)
        });
        let proxy = DelayProxy::start(target, Duration::from_millis(300))?;
        let mut client = std::net::TcpStream::connect(proxy.addr())?;
        let sent = Instant::now();
        client.write_all(b"?")?;
        let mut first = [0u8; 1];
        client.read_exact(&mut first)?;
        let first_at = sent.elapsed();
        let mut rest = Vec::new();
        client.read_to_end(&mut rest)?;
        let last_at = sent.elapsed();
        let received = server.join().expect("server thread")?;

        assert!(received.duration_since(sent) < Duration::from_millis(100));
        assert!(first_at >= Duration::from_millis(300), "{first_at:?}");
        assert!(last_at >= Duration::from_millis(750), "{last_at:?}");
        assert!(last_at < Duration::from_millis(1300), "{last_at:?}");
        let mut all = first.to_vec();
        all.extend(rest);
        let expected: Vec<u8> = (0..10u8).flat_map(|i| [i; 1000]).collect();
        assert_eq!(all, expected);
        Ok(())
    }

    #[test]
    fn set_delay_and_url() -> anyhow::Result<()> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let target = listener.local_addr()?;
        let proxy = DelayProxy::start_for_url(&format!("https://{target}"), Duration::ZERO)?;
        assert_eq!(proxy.target(), target);
        assert_eq!(proxy.url(), format!("https://127.0.0.1:{}", proxy.port()));
        proxy.set_delay(Duration::from_millis(250));
        assert_eq!(proxy.delay(), Duration::from_millis(250));
        Ok(())
    }
}

//! The simulator's listeners under slow, idle and numerous clients, as kube-apiserver's
//! server copes with them: partial headers, a trickling body, a connection that sends
//! nothing (plain or past the TLS handshake) and a stalled TLS handshake are closed at
//! their deadlines; a watch that has nothing to send is not idle; at most
//! `max_connections` are served at once. Short limits keep the tests quick.

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use terrace_simulator::listener::ConnectionLimits;
use terrace_simulator::{SimConfig, Simulator};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type R = anyhow::Result<()>;

fn limits() -> ConnectionLimits {
    ConnectionLimits {
        header_read_timeout: Duration::from_millis(300),
        body_read_timeout: Duration::from_millis(400),
        body_min_rate: 1000,
        idle_timeout: Duration::from_millis(2000),
        max_connections: 64,
    }
}

async fn sim(limits: ConnectionLimits) -> anyhow::Result<Simulator> {
    Ok(Simulator::open(SimConfig {
        limits,
        run_pods: false,
        ..SimConfig::default()
    })
    .await?)
}

/// Serves `sim` on a free port, over TLS or plain HTTP.
async fn serve(sim: &Simulator, tls: bool) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let s = sim.clone();
    tokio::spawn(async move {
        if tls {
            s.serve(listener).await
        } else {
            s.serve_plain(listener).await
        }
    });
    Ok(addr)
}

/// Reads until the server closes (or `within` passes): what it sent and whether it closed.
async fn until_closed(s: &mut TcpStream, within: Duration) -> (String, bool) {
    let mut out = Vec::new();
    let closed = tokio::time::timeout(within, async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .is_ok();
    (String::from_utf8_lossy(&out).into_owned(), closed)
}

/// Copies `ReadHeaderTimeout` and the idle timeout of kube-apiserver's HTTP server:
/// partial headers are cut at the header deadline (from the request's first byte), a
/// silent connection at the idle deadline, which is later; a body that trickles is cut
/// at the body deadline (the request fails, the connection closes).
#[tokio::test]
async fn slow_and_idle_plain_connections_are_closed() -> R {
    let sim = sim(limits()).await?;
    let addr = serve(&sim, false).await?;
    let started = Instant::now();
    let mut partial = TcpStream::connect(addr).await?;
    partial
        .write_all(b"GET /api/v1/namespaces HTTP/1.1\r\nHost: x\r\nAcc")
        .await?;
    let mut idle = TcpStream::connect(addr).await?;
    let mut body = TcpStream::connect(addr).await?;
    body.write_all(
        b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n{",
    )
    .await?;

    let (_, closed) = until_closed(&mut partial, Duration::from_secs(3)).await;
    let at = started.elapsed();
    assert!(
        closed && at >= Duration::from_millis(250) && at < Duration::from_millis(1500),
        "partial headers: {at:?}"
    );
    let (text, closed) = until_closed(&mut body, Duration::from_secs(3)).await;
    assert!(closed, "trickling body kept open");
    assert!(!text.starts_with("HTTP/1.1 2"), "{text}");
    let (_, closed) = until_closed(&mut idle, Duration::from_secs(5)).await;
    let at = started.elapsed();
    assert!(closed && at >= Duration::from_millis(1900), "idle: {at:?}");
    sim.shutdown().await;
    Ok(())
}

/// Copies the TLS side of the secure port: a client that never finishes its handshake is
/// dropped (here at the header deadline, shorter than the handshake's own 10 s), and one
/// that completes it and sends nothing is closed as idle.
#[tokio::test]
async fn stalled_tls_handshakes_and_idle_tls_connections_are_closed() -> R {
    let sim = sim(limits()).await?;
    let addr = serve(&sim, true).await?;
    let started = Instant::now();
    let mut raw = TcpStream::connect(addr).await?;
    let (_, closed) = until_closed(&mut raw, Duration::from_secs(3)).await;
    let at = started.elapsed();
    assert!(
        closed && at < Duration::from_millis(1500),
        "stalled handshake: {at:?}"
    );

    // A client that completes the handshake (kube's TLS stack, through a request) and
    // keeps its connection: the next request after the idle timeout needs a new one,
    // which kube opens transparently; what matters is that requests keep working.
    let url = format!("https://{addr}");
    let kc = Kubeconfig::from_yaml(&sim.kubeconfig(&url, &sim.admin_token()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    let client = kube::Client::try_from(config)?;
    assert_eq!(client.apiserver_version().await?.major, "1");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(client.apiserver_version().await?.major, "1");
    sim.shutdown().await;
    Ok(())
}

/// Copies long-running requests: a watch with nothing to send for longer than the idle
/// timeout keeps its connection and still delivers the next event.
#[tokio::test]
async fn a_quiet_watch_is_not_idle() -> R {
    let sim = sim(limits()).await?;
    let addr = serve(&sim, true).await?;
    let url = format!("https://{addr}");
    let kc = Kubeconfig::from_yaml(&sim.kubeconfig(&url, &sim.admin_token()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    let api: Api<ConfigMap> = Api::namespaced(kube::Client::try_from(config)?, "default");
    let mut events = api
        .watch(&WatchParams::default().timeout(30), "0")
        .await?
        .boxed();
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {"name": "late"}}))?;
    Api::<ConfigMap>::namespaced(sim.client(), "default")
        .create(&PostParams::default(), &cm)
        .await?;
    let event = tokio::time::timeout(Duration::from_secs(5), events.next()).await?;
    match event {
        Some(Ok(WatchEvent::Added(cm))) => assert_eq!(cm.metadata.name.as_deref(), Some("late")),
        other => anyhow::bail!("expected ADDED, got {other:?}"),
    }
    sim.shutdown().await;
    Ok(())
}

/// Copies a capped server: with `max_connections` 2, a third connection is served only
/// once one of the first two closes.
#[tokio::test]
async fn connection_cap() -> R {
    let sim = sim(ConnectionLimits {
        max_connections: 2,
        ..limits()
    })
    .await?;
    let addr = serve(&sim, false).await?;
    let first = TcpStream::connect(addr).await?;
    let _second = TcpStream::connect(addr).await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut third = TcpStream::connect(addr).await?;
    third
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await?;
    let mut buf = [0u8; 256];
    let early = tokio::time::timeout(Duration::from_millis(200), third.read(&mut buf)).await;
    assert!(early.is_err(), "served beyond the cap");
    drop(first);
    let n = tokio::time::timeout(Duration::from_secs(3), third.read(&mut buf)).await??;
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    sim.shutdown().await;
    Ok(())
}

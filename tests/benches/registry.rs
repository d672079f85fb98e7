//! Benchmark of issue 28 (the private module registry), against `terrace dev` (no
//! kubelet: the versions' test runs stay queued, which changes nothing of what is
//! measured), each figure beside a baseline taken in the same run:
//!
//! 1. The protocol's version list of a module with 500 published versions
//!    (`GET /api/registry/v1/modules/:org/:name/:provider/versions`), p50 and p90 over
//!    200 requests, against `GET /api/v2/ping` (a round trip to the API server, no
//!    authentication). Target: p50 ≤ 2 ms.
//! 2. Downloading a 5 MiB module archive through terrace (the `X-Terraform-Get`
//!    capability URL) vs the same bytes from a plain static file server on loopback,
//!    medians of 20. Target: ≤ 1.5x.
//!
//! Run: `cargo build -p terrace && cargo bench --profile dev -p terrace-tests --bench registry`
//! (`TERRACE_BENCH_VERSIONS`, default 500).

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use serde_json::json;
use terrace_tests::bench::{env_usize, median};
use terrace_tests::{Api, Dev};

const ORG: &str = "benchreg";

/// A tar.gz of a module whose `blob.bin` is `bytes` long (incompressible).
fn archive(bytes: usize) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    let mut add = |path: &str, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        tar.append_data(&mut h, path, data).expect("tar entry");
    };
    add("main.tf", b"output \"x\" {\n  value = 1\n}\n");
    if bytes > 0 {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let data: Vec<u8> = (0..bytes)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect();
        add("blob.bin", &data);
    }
    tar.into_inner().and_then(|g| g.finish()).expect("tar.gz")
}

fn publish(api: &Api, version: &str, body: Vec<u8>) {
    let r = api.post(
        &format!("/api/v2/registry-modules/{ORG}/vpc/aws/versions"),
        &json!({"data": {"type": "registry-module-versions", "attributes": {"version": version}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    let upload = r.body["data"]["links"]["upload"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        api.put_unauthenticated(&upload[upload.find("/api/v2/").expect("path")..], body),
        200
    );
}

fn timed(n: usize, mut f: impl FnMut()) -> Vec<Duration> {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect()
}

fn pct(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A static file server on loopback answering every GET with `body`.
fn static_server(body: Vec<u8>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let body = std::sync::Arc::new(body);
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let body = body.clone();
            std::thread::spawn(move || {
                let mut conn = conn;
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf);
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/gzip\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes());
                let _ = conn.write_all(&body);
            });
        }
    });
    format!("http://127.0.0.1:{port}/vpc.tar.gz")
}

fn fetch(url: &str) -> usize {
    let mut res = ureq::get(url).call().expect("GET");
    let mut sink = Vec::new();
    res.body_mut()
        .with_config()
        .limit(64 << 20)
        .reader()
        .read_to_end(&mut sink)
        .expect("body");
    sink.len()
}

fn main() {
    let n = env_usize("TERRACE_BENCH_VERSIONS", 500);
    let dev = Dev::start_with(&["--no-kubelet"]);
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let r = api.post(
        &format!("/api/v2/organizations/{ORG}/registry-modules"),
        &json!({"data": {"type": "registry-modules", "attributes": {"name": "vpc", "provider": "aws"}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    let small = archive(0);
    let start = Instant::now();
    for i in 0..n {
        publish(&api, &format!("1.{}.{}", i / 100, i % 100), small.clone());
    }
    println!(
        "published {n} versions in {:.1} s",
        start.elapsed().as_secs_f64()
    );

    // 1. The version list.
    let list = format!("/api/registry/v1/modules/{ORG}/vpc/aws/versions");
    let r = api.get(&list);
    let listed = r.body["modules"][0]["versions"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(listed, n, "every version listed");
    for _ in 0..20 {
        api.get(&list);
        api.get("/api/v2/ping");
    }
    let versions = timed(200, || assert_eq!(api.get(&list).status, 200));
    let ping = timed(200, || {
        api.get("/api/v2/ping");
    });
    let (v50, v90, p50) = (
        pct(versions.clone(), 0.5),
        pct(versions, 0.9),
        pct(ping, 0.5),
    );
    println!("version list of {n} versions (200 requests):");
    println!(
        "  GET /api/v2/ping: p50 {:.2} ms (baseline: a round trip to the API server)",
        ms(p50)
    );
    println!(
        "  GET …/versions: p50 {:.2} ms, p90 {:.2} ms ({:.2}x baseline; target p50 <= 2 ms)",
        ms(v50),
        ms(v90),
        v50.as_secs_f64() / p50.as_secs_f64()
    );

    // 2. A 5 MiB archive.
    let big = archive(5 << 20);
    let size = big.len();
    publish(&api, "9.0.0", big.clone());
    let dl = format!(
        "{}/api/registry/v1/modules/{ORG}/vpc/aws/9.0.0/download",
        dev.api
    );
    let res = ureq::get(&dl)
        .header("Authorization", format!("Bearer {}", dev.token))
        .call()
        .expect("download");
    assert_eq!(res.status().as_u16(), 204);
    let url = res
        .headers()
        .get("x-terraform-get")
        .and_then(|v| v.to_str().ok())
        .expect("X-Terraform-Get")
        .to_owned();
    let plain = static_server(big);
    assert_eq!(fetch(&url), size);
    assert_eq!(fetch(&plain), size);
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        ours.extend(timed(1, || assert_eq!(fetch(&url), size)));
        theirs.extend(timed(1, || assert_eq!(fetch(&plain), size)));
    }
    let (o, t) = (median(ours), median(theirs));
    println!(
        "download of a {:.1} MiB module archive (20 each, alternating, medians):",
        size as f64 / 1048576.0
    );
    println!(
        "  static file server on loopback: {:.1} ms (baseline)",
        ms(t)
    );
    println!(
        "  terrace's X-Terraform-Get URL: {:.1} ms ({:.2}x baseline, target <= 1.5x)",
        ms(o),
        o.as_secs_f64() / t.as_secs_f64()
    );
}

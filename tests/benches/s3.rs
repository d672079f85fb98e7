//! Benchmark of issue 15 (the S3-compatible blob store), against `terrace dev
//! --blob-store s3://…` and `moto_server` on loopback, each figure a ratio against a
//! baseline measured in the same run:
//!
//! 1. Upload + download of a 50 MiB state through the API (create, upload, finalize,
//!    download) vs. the same bytes PUT and GET straight to the S3 server with a plain
//!    client (`object_store`, the client terrace uses; target ≤ 1.5x).
//! 2. Memory: the `terrace dev` process's RSS sampled during 10 concurrent 50 MiB
//!    uploads: peak above idle, in all and per upload, as a multiple of the 8 MiB part
//!    size (target: under 10x in all; uploads stream, with at most `PART_BUFFERS`
//!    parts in memory across them).
//!
//! Run: `cargo build -p terrace && cargo bench --profile dev -p terrace-tests --bench s3`
//! (`TERRACE_BENCH_REPS`, default 3; `TERRACE_BENCH_MIB`, default 50;
//! `TERRACE_BENCH_CONCURRENT`, default 10). Needs `moto_server` on PATH.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use terrace_blobstore::s3::{PART_BUFFERS, PART_BYTES, S3Store};
use terrace_blobstore::{BlobStore, BlobStoreSettings, Location};
use terrace_tests::bench::{PeakRss, env_usize, median, rss_kib};
use terrace_tests::{Api, Dev, Moto};

const ORG: &str = "bench";
const BUCKET: &str = "bench-blobs";

/// A state file of about `size` bytes: managed resources with attribute payloads.
fn big_state(serial: i64, lineage: &str, size: usize) -> Vec<u8> {
    let per = 1024;
    let instances: Vec<Value> = (0..size / per * 108 / 100)
        .map(|i| {
            json!({"schema_version": 0, "attributes": {
                "id": format!("{i:08}"),
                "input": {"value": format!("{i}-{}", "x".repeat(per - 160)), "type": "string"},
            }})
        })
        .collect();
    serde_json::to_vec(&json!({
        "version": 4, "terraform_version": "1.11.4", "serial": serial, "lineage": lineage,
        "outputs": {},
        "resources": [{"mode": "managed", "type": "terraform_data", "name": "blob",
            "provider": "provider[\"terraform.io/builtin/terraform\"]", "instances": instances}],
    }))
    .expect("state")
}

fn path_of(url: &Value) -> String {
    let url = url.as_str().unwrap_or_default();
    url.find("/api/v2/")
        .map(|i| url[i..].to_owned())
        .unwrap_or_default()
}

/// Creates a version of `bytes` on workspace `ws` (locked): its ID and upload path.
fn create_version(
    api: &Api,
    ws: &str,
    serial: i64,
    lineage: &str,
    bytes: &[u8],
) -> (String, String) {
    let r = api.post(
        &format!("/api/v2/workspaces/{ws}/state-versions"),
        &json!({"data": {"type": "state-versions", "attributes": {
            "serial": serial, "lineage": lineage, "md5": terrace_crds::state::md5_hex(bytes)}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    (
        r.body["data"]["id"].as_str().unwrap_or_default().to_owned(),
        path_of(&r.body["data"]["attributes"]["hosted-state-upload-url"]),
    )
}

/// GETs `path` with the admin token: the status and the body's length (no size limit,
/// unlike the test helper's text reads).
fn download(dev: &Dev, path: &str) -> (u16, usize) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into();
    let req = ureq::http::Request::builder()
        .method("GET")
        .uri(format!("{}{path}", dev.api))
        .header("Authorization", format!("Bearer {}", dev.token))
        .body(())
        .expect("request");
    let mut res = agent.run(req).expect("HTTP round trip");
    let status = res.status().as_u16();
    let body = res
        .body_mut()
        .with_config()
        .limit(u64::MAX)
        .read_to_vec()
        .expect("body");
    (status, body.len())
}

fn locked_workspace(api: &Api, name: &str) -> String {
    let ws = api.create_workspace(ORG, json!({"name": name}));
    let r = api.post(&format!("/api/v2/workspaces/{ws}/actions/lock"), &json!({}));
    assert_eq!(r.status, 200, "{:?}", r.body);
    ws
}

fn main() {
    // The baseline client, like terrace, reads its credentials from the environment: run
    // again with moto's when they are not set (no unsafe set_var in a running process).
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
        let status = std::process::Command::new(std::env::current_exe().expect("exe"))
            .args(std::env::args_os().skip(1))
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .status()
            .expect("re-run the bench");
        std::process::exit(status.code().unwrap_or(1));
    }
    let reps = env_usize("TERRACE_BENCH_REPS", 3).max(1);
    let mib = env_usize("TERRACE_BENCH_MIB", 50).max(1);
    let concurrent = env_usize("TERRACE_BENCH_CONCURRENT", 10).max(1);
    let Some(moto) = Moto::start() else {
        return;
    };
    moto.create_bucket(BUCKET);
    let aws = [
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
    ];
    let store = format!("s3://{BUCKET}/terrace");
    let url = moto.url();
    let max = (2 * mib * 1024 * 1024).to_string();
    let dev = Dev::start_with_env(
        &[
            "--blob-store",
            &store,
            "--s3-endpoint",
            &url,
            "--s3-path-style",
            "--s3-region",
            "us-east-1",
            "--max-state-bytes",
            &max,
        ],
        &aws,
    );
    let api = Api::admin(&dev);
    api.create_org(ORG);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let plain = S3Store::from_settings(&BlobStoreSettings {
        location: Location::parse(&format!("s3://{BUCKET}/baseline")).expect("location"),
        s3_endpoint: Some(url.clone()),
        s3_region: Some("us-east-1".into()),
        s3_path_style: true,
    })
    .expect("client")
    .expect("s3")
    .scoped("bench");

    // 1. Upload + download through the API vs. straight to S3.
    let ws = locked_workspace(&api, "big-state");
    let (mut through_api, mut baseline) = (Vec::new(), Vec::new());
    let mut size = 0;
    for i in 0..reps {
        let serial = i as i64 + 1;
        let bytes = big_state(serial, "bench-lineage", mib * 1024 * 1024);
        size = bytes.len();
        let start = Instant::now();
        let (id, upload) = create_version(&api, &ws, serial, "bench-lineage", &bytes);
        assert_eq!(api.put_unauthenticated(&upload, bytes.clone()), 200);
        let (status, len) = download(&dev, &format!("/api/v2/state-versions/{id}/download"));
        through_api.push(start.elapsed());
        assert_eq!((status, len), (200, size));

        let payload = terrace_blobstore::Bytes::from(bytes);
        let start = Instant::now();
        rt.block_on(async {
            plain
                .put(&format!("state-{i}"), payload.clone())
                .await
                .expect("baseline put");
            let back = plain
                .get(&format!("state-{i}"), None)
                .await
                .expect("baseline get");
            assert_eq!(back.len(), size);
        });
        baseline.push(start.elapsed());
    }
    let (a, b) = (median(through_api), median(baseline));
    println!(
        "state of {:.1} MiB: upload + download (median of {reps})",
        size as f64 / 1048576.0
    );
    println!(
        "  straight to the S3 server with object_store (baseline): {:.3} s",
        b.as_secs_f64()
    );
    println!(
        "  through the state versions API (create, upload, finalize, download): {:.3} s ({:.2}x baseline, target <= 1.5x)",
        a.as_secs_f64(),
        a.as_secs_f64() / b.as_secs_f64()
    );

    // 2. RSS during concurrent uploads.
    let pid = dev.pid().expect("terrace dev pid");
    let uploads: Vec<(String, Vec<u8>)> = (0..concurrent)
        .map(|i| {
            let ws = locked_workspace(&api, &format!("concurrent-{i}"));
            let bytes = big_state(1, &format!("lineage-{i}"), mib * 1024 * 1024);
            let (_, path) = create_version(&api, &ws, 1, &format!("lineage-{i}"), &bytes);
            (path, bytes)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let idle = rss_kib(pid);
    let sampler = PeakRss::start(pid, idle, Duration::from_millis(5));
    let start = Instant::now();
    let handles: Vec<_> = uploads
        .into_iter()
        .map(|(path, bytes)| {
            let api = Api::admin(&dev);
            std::thread::spawn(move || api.put_unauthenticated(&path, bytes))
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().expect("upload thread"), 200);
    }
    let took = start.elapsed();
    let peak = sampler.stop();
    let per_upload = (peak.saturating_sub(idle)) as f64 / concurrent as f64 / 1024.0;
    let part = PART_BYTES as f64 / 1048576.0;
    println!(
        "{concurrent} concurrent uploads of {:.1} MiB each: {:.2} s",
        size as f64 / 1048576.0,
        took.as_secs_f64()
    );
    println!(
        "  terrace dev RSS: idle {:.1} MiB, peak {:.1} MiB, +{:.1} MiB per upload ({:.2}x the state size, {:.1}x the {part:.0} MiB part; target: peak above idle under 10x the part)",
        idle as f64 / 1024.0,
        peak as f64 / 1024.0,
        per_upload,
        per_upload / (size as f64 / 1048576.0),
        (peak.saturating_sub(idle)) as f64 / 1024.0 / part,
    );
    println!("  (streamed uploads hold at most {PART_BUFFERS} parts in memory at once)");
}

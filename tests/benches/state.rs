//! Benchmark of issue 14 (state versions), against `terrace dev`, each figure a ratio
//! against a baseline measured in the same run:
//!
//! 1. `terraform apply` of 200 `terraform_data` resources through a `cloud` block (local
//!    execution, state and lock in terrace) vs. the same apply with the local backend
//!    (target ≤ 1.3x wall time).
//! 2. Create + upload + finalize of a 5 MiB state through the API vs. writing the same
//!    bytes as Secrets (512 KiB chunks) straight through the Kubernetes API of the same
//!    simulator (target ≤ 1.5x).
//! 3. Memory: the `terrace dev` process's RSS (simulator, operator and API server
//!    together) sampled during 10 concurrent 5 MiB uploads: peak above idle, per upload.
//!
//! Run: `cargo build -p terrace && cargo bench --profile dev -p terrace-tests --bench state`
//! (`TERRACE_BENCH_REPS`, default 3; `TERRACE_BENCH_RESOURCES`, default 200).

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};
use terrace_tests::bench::{PeakRss, env_usize, median, rss_kib, secs};
use terrace_tests::{Api, CLI_HOST, Dev, Terraform, text};

const ORG: &str = "bench";
const STATE_BYTES: usize = 5 * 1024 * 1024;
const CHUNK: usize = 512 * 1024;
const CONCURRENT: usize = 10;

fn main_tf(n: usize, backend: &str) -> String {
    format!(
        r#"
terraform {{
{backend}
}}
resource "terraform_data" "item" {{
  count = {n}
  input = "item-${{count.index}}"
}}
output "count" {{
  value = length(terraform_data.item)
}}
"#
    )
}

/// Wall time of `terraform apply` in a fresh directory (init not counted).
fn timed_apply(tf: &Terraform, dir: &Path, body: &str) -> Duration {
    std::fs::create_dir_all(dir).expect("dir");
    std::fs::write(dir.join("main.tf"), body).expect("main.tf");
    let out = tf.run(dir, &["init", "-input=false"]);
    assert!(out.status.success(), "init: {}", text(&out));
    let start = Instant::now();
    let out = tf.run(dir, &["apply", "-auto-approve", "-input=false"]);
    let took = start.elapsed();
    assert!(out.status.success(), "apply: {}", text(&out));
    took
}

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

/// Creates a version of `bytes` on workspace `ws` (locked by the caller): its upload path.
fn create_version(api: &Api, ws: &str, serial: i64, lineage: &str, bytes: &[u8]) -> String {
    let r = api.post(
        &format!("/api/v2/workspaces/{ws}/state-versions"),
        &json!({"data": {"type": "state-versions", "attributes": {
            "serial": serial, "lineage": lineage, "md5": terrace_crds::state::md5_hex(bytes)}}}),
    );
    assert_eq!(r.status, 201, "{:?}", r.body);
    path_of(&r.body["data"]["attributes"]["hosted-state-upload-url"])
}

fn locked_workspace(api: &Api, name: &str) -> String {
    let ws = api.create_workspace(ORG, json!({"name": name}));
    let r = api.post(&format!("/api/v2/workspaces/{ws}/actions/lock"), &json!({}));
    assert_eq!(r.status, 200, "{:?}", r.body);
    ws
}

fn main() {
    let reps = env_usize("TERRACE_BENCH_REPS", 3).max(1);
    let resources = env_usize("TERRACE_BENCH_RESOURCES", 200);
    let dev = Dev::start();
    let api = Api::admin(&dev);
    api.create_org(ORG);
    // The state path: the CLI plans and applies (runs in Pods are benches/runs.rs).
    api.set_default_execution_mode(ORG, "local");
    let tf = Terraform::for_dev(&dev);
    let work = tempfile::tempdir().expect("work dir");

    // 1. terraform apply: cloud block (local execution) vs local backend.
    let mut local = Vec::new();
    let mut cloud = Vec::new();
    for i in 0..reps {
        local.push(timed_apply(
            &tf,
            &work.path().join(format!("local-{i}")),
            &main_tf(resources, ""),
        ));
        let backend = format!(
            "  cloud {{\n    hostname = \"{CLI_HOST}\"\n    organization = \"{ORG}\"\n    workspaces {{\n      name = \"apply-{i}\"\n    }}\n  }}"
        );
        cloud.push(timed_apply(
            &tf,
            &work.path().join(format!("cloud-{i}")),
            &main_tf(resources, &backend),
        ));
    }
    let (l, c) = (median(local), median(cloud));
    println!("terraform apply of {resources} terraform_data (median of {reps})");
    println!("  local backend (baseline): {:.2} s", secs(l));
    println!(
        "  cloud block, local execution: {:.2} s ({:.2}x baseline, target <= 1.3x)",
        secs(c),
        secs(c) / secs(l)
    );

    // 2. A 5 MiB state through the API vs the same bytes as Secrets.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let client = rt.block_on(async {
        let kc = Kubeconfig::read_from(dev.kubeconfig()).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .expect("config");
        kube::Client::try_from(config).expect("client")
    });
    let ws = locked_workspace(&api, "big-state");
    let mut through_api = Vec::new();
    let mut baseline = Vec::new();
    let mut size = 0;
    for i in 0..reps {
        let serial = i as i64 + 1;
        let bytes = big_state(serial, "bench-lineage", STATE_BYTES);
        size = bytes.len();
        let start = Instant::now();
        let upload = create_version(&api, &ws, serial, "bench-lineage", &bytes);
        assert_eq!(api.put_unauthenticated(&upload, bytes.clone()), 200);
        through_api.push(start.elapsed());

        let secrets: kube::Api<Secret> = kube::Api::namespaced(client.clone(), ORG);
        let start = Instant::now();
        rt.block_on(async {
            for (n, chunk) in bytes.chunks(CHUNK).enumerate() {
                let s = Secret {
                    metadata: ObjectMeta {
                        name: Some(format!("baseline-{i}-{n}")),
                        ..ObjectMeta::default()
                    },
                    data: Some([("chunk".to_owned(), ByteString(chunk.to_vec()))].into()),
                    ..Secret::default()
                };
                secrets
                    .create(&PostParams::default(), &s)
                    .await
                    .expect("baseline secret");
            }
        });
        baseline.push(start.elapsed());
    }
    let (a, b) = (median(through_api), median(baseline));
    println!(
        "state of {:.1} MiB: create + upload + finalize (median of {reps})",
        size as f64 / 1048576.0
    );
    println!(
        "  the same bytes as {} Secrets through the Kubernetes API (baseline): {:.3} s",
        size.div_ceil(CHUNK),
        secs(b)
    );
    println!(
        "  through the state versions API: {:.3} s ({:.2}x baseline, target <= 1.5x)",
        secs(a),
        secs(a) / secs(b)
    );

    // 3. RSS during 10 concurrent uploads.
    let pid = dev.pid().expect("terrace dev pid");
    let uploads: Vec<(String, Vec<u8>)> = (0..CONCURRENT)
        .map(|i| {
            let ws = locked_workspace(&api, &format!("concurrent-{i}"));
            let bytes = big_state(1, &format!("lineage-{i}"), STATE_BYTES);
            let path = create_version(&api, &ws, 1, &format!("lineage-{i}"), &bytes);
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
    let per_upload = (peak.saturating_sub(idle)) as f64 / CONCURRENT as f64 / 1024.0;
    println!(
        "{CONCURRENT} concurrent uploads of {:.1} MiB each: {:.2} s",
        size as f64 / 1048576.0,
        secs(took)
    );
    println!(
        "  terrace dev RSS: idle {:.1} MiB, peak {:.1} MiB, +{:.1} MiB per upload ({:.2}x the state size)",
        idle as f64 / 1024.0,
        peak as f64 / 1024.0,
        per_upload,
        per_upload / (size as f64 / 1048576.0)
    );
}

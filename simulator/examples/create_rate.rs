//! Creates per second against a persisted simulator, by number of concurrent writers:
//! what a write costs now that it is answered only once its log record is on disk.
//!
//! ```sh
//! cargo run -p terrace-simulator --example create_rate -- [COUNT] [DIR]
//! ```
//!
//! Opens a simulator on `DIR` (default: a fresh temporary directory, on the same
//! filesystem as the system's temporary folder), then for 1, 4, 16 and 64 concurrent
//! writers creates `COUNT` (default 2000) ConfigMaps through the in-process client (no
//! sockets, so the figure is the store's and the log's) and prints creates/s.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use std::time::Instant;
use terrace_simulator::{SimConfig, Simulator};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let count: usize = match args.next() {
        Some(c) => c.parse()?,
        None => 2000,
    };
    let tmp = tempfile::tempdir()?;
    let dir = args
        .next()
        .map_or_else(|| tmp.path().to_owned(), Into::into);
    let sim = Simulator::open(SimConfig {
        data_dir: Some(dir.clone()),
        run_pods: false,
        ..SimConfig::default()
    })
    .await?;
    let api: Api<ConfigMap> = Api::namespaced(sim.client(), "default");
    println!("data directory {}", dir.display());
    for writers in [1usize, 4, 16, 64] {
        let started = Instant::now();
        let mut tasks = Vec::new();
        for w in 0..writers {
            let api = api.clone();
            let per = count / writers;
            tasks.push(tokio::spawn(async move {
                for i in 0..per {
                    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                        "metadata": {"name": format!("rate-{writers}-{w}-{i}")},
                        "data": {"k": "v"},
                    }))?;
                    api.create(&PostParams::default(), &cm).await?;
                }
                anyhow::Ok(per)
            }));
        }
        let mut done = 0;
        for t in tasks {
            done += t.await??;
        }
        let secs = started.elapsed().as_secs_f64();
        println!(
            "{writers:>3} writers: {done} creates in {secs:.2} s = {:.0} creates/s",
            done as f64 / secs
        );
    }
    sim.shutdown().await;
    Ok(())
}

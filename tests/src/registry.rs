//! A container registry on loopback for the real-node tier (issue 40 §4): it serves one
//! image (exported from the node's containerd) through the OCI distribution API, and
//! answers its first manifest request `503 Service Unavailable`, as a registry having a
//! blip does. The kubelet must pull it again, and the run must not error in between.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The registry's content: blobs by digest, the image's top manifest (index or manifest)
/// with its media type and digest.
struct Content {
    blobs: HashMap<String, Vec<u8>>,
    media_types: HashMap<String, String>,
    top: String,
}

/// A running registry.
pub struct FlakyRegistry {
    /// `127.0.0.1:PORT`.
    pub host: String,
    /// Manifest requests answered so far (the first with 503).
    pub manifest_requests: Arc<AtomicUsize>,
    /// Every request line seen, in order.
    pub requests: Arc<Mutex<Vec<String>>>,
}

impl FlakyRegistry {
    /// Serves the OCI image archive `archive` (`ctr images export`) on a free loopback
    /// port.
    pub fn serve(archive: &Path) -> FlakyRegistry {
        let content = Arc::new(read_archive(archive));
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the registry");
        let host = listener.local_addr().expect("address").to_string();
        let manifest_requests = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (count, seen) = (manifest_requests.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (content, count, seen) = (content.clone(), count.clone(), seen.clone());
                std::thread::spawn(move || answer(stream, &content, &count, &seen));
            }
        });
        FlakyRegistry {
            host,
            manifest_requests,
            requests,
        }
    }
}

fn read_archive(path: &Path) -> Content {
    let mut archive = tar::Archive::new(std::fs::File::open(path).expect("the image archive"));
    let mut files: HashMap<String, Vec<u8>> = HashMap::new();
    for entry in archive.entries().expect("entries") {
        let mut entry = entry.expect("entry");
        let name = entry.path().expect("path").display().to_string();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).expect("read entry");
        files.insert(name.trim_start_matches("./").to_owned(), bytes);
    }
    let mut blobs = HashMap::new();
    for (name, bytes) in &files {
        if let Some(hex) = name.strip_prefix("blobs/sha256/") {
            blobs.insert(format!("sha256:{hex}"), bytes.clone());
        }
    }
    let index: serde_json::Value =
        serde_json::from_slice(files.get("index.json").expect("index.json")).expect("index");
    let mut media_types = HashMap::new();
    let top = index["manifests"][0]["digest"]
        .as_str()
        .expect("a manifest")
        .to_owned();
    // Every manifest's media type, as the index and the manifests name them.
    let mut pending = vec![index.clone()];
    while let Some(doc) = pending.pop() {
        for m in doc["manifests"].as_array().into_iter().flatten() {
            if let (Some(d), Some(t)) = (m["digest"].as_str(), m["mediaType"].as_str()) {
                media_types.insert(d.to_owned(), t.to_owned());
                if let Some(b) = blobs.get(d)
                    && let Ok(v) = serde_json::from_slice::<serde_json::Value>(b)
                {
                    pending.push(v);
                }
            }
        }
    }
    let mut content = Content {
        blobs,
        media_types,
        top,
    };
    distinct(&mut content);
    content
}

fn sha256_digest(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let hex: String = Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// Makes the served image one of its own (a label in its configuration, so another
/// image ID): a node that holds the same image under another name keeps that name
/// apart from this one (containerd's CRI store merges the names of one image ID).
fn distinct(c: &mut Content) {
    let is_index =
        |t: Option<&String>| t.is_some_and(|t| t.contains("index") || t.contains("list"));
    let mut manifest_digest = c.top.clone();
    if is_index(c.media_types.get(&manifest_digest)) {
        let index: serde_json::Value =
            serde_json::from_slice(&c.blobs[&manifest_digest]).expect("the index");
        manifest_digest = index["manifests"][0]["digest"]
            .as_str()
            .expect("a manifest in the index")
            .to_owned();
    }
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&c.blobs[&manifest_digest]).expect("the manifest");
    let config_digest = manifest["config"]["digest"]
        .as_str()
        .expect("the config")
        .to_owned();
    let mut config: serde_json::Value =
        serde_json::from_slice(&c.blobs[&config_digest]).expect("the config");
    config["config"]["Labels"]["terrace.test/flaky-registry"] = serde_json::json!("1");
    let config_bytes = serde_json::to_vec(&config).expect("config bytes");
    let config_digest = sha256_digest(&config_bytes);
    manifest["config"]["digest"] = serde_json::json!(config_digest);
    manifest["config"]["size"] = serde_json::json!(config_bytes.len());
    c.blobs.insert(config_digest, config_bytes);
    let manifest_bytes = serde_json::to_vec(&manifest).expect("manifest bytes");
    let new_digest = sha256_digest(&manifest_bytes);
    let media = manifest["mediaType"]
        .as_str()
        .unwrap_or("application/vnd.oci.image.manifest.v1+json")
        .to_owned();
    c.media_types.insert(new_digest.clone(), media);
    c.blobs.insert(new_digest.clone(), manifest_bytes);
    c.top = new_digest;
}

fn answer(stream: TcpStream, content: &Content, count: &AtomicUsize, seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
    }
    seen.lock().expect("requests").push(line.trim().to_owned());
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let head = method == "HEAD";
    let (status, kind, digest, body): (&str, String, Option<String>, Vec<u8>) =
        if path == "/v2/" || path == "/v2" {
            ("200 OK", "application/json".into(), None, b"{}".to_vec())
        } else if let Some((_, reference)) = path.split_once("/manifests/") {
            if count.fetch_add(1, Ordering::SeqCst) == 0 {
                (
                    "503 Service Unavailable",
                    "application/json".into(),
                    None,
                    br#"{"errors":[{"code":"UNAVAILABLE","message":"try again"}]}"#.to_vec(),
                )
            } else {
                let d = if reference.starts_with("sha256:") {
                    reference.to_owned()
                } else {
                    content.top.clone()
                };
                match content.blobs.get(&d) {
                    Some(b) => {
                        (
                            "200 OK",
                            content.media_types.get(&d).cloned().unwrap_or_else(|| {
                                "application/vnd.oci.image.manifest.v1+json".into()
                            }),
                            Some(d),
                            b.clone(),
                        )
                    }
                    None => (
                        "404 Not Found",
                        "application/json".into(),
                        None,
                        b"{}".to_vec(),
                    ),
                }
            }
        } else if let Some((_, d)) = path.split_once("/blobs/") {
            match content.blobs.get(d) {
                Some(b) => (
                    "200 OK",
                    "application/octet-stream".into(),
                    Some(d.to_owned()),
                    b.clone(),
                ),
                None => (
                    "404 Not Found",
                    "application/json".into(),
                    None,
                    b"{}".to_vec(),
                ),
            }
        } else {
            (
                "404 Not Found",
                "application/json".into(),
                None,
                b"{}".to_vec(),
            )
        };
    let mut out = stream;
    let mut head_text = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(d) = digest {
        head_text.push_str(&format!("Docker-Content-Digest: {d}\r\n"));
    }
    head_text.push_str("\r\n");
    let _ = out.write_all(head_text.as_bytes());
    if !head {
        let _ = out.write_all(&body);
    }
}

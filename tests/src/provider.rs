//! The test provider (`tests/provider`, `terraform-provider-files`): a real Terraform
//! provider whose objects are JSON files in a directory the test owns, so a test can
//! change them behind the engine's back (drift). Built on first use with cargo into
//! `target/test-provider` (its own workspace and lock file) and laid out as a filesystem
//! mirror for the engine: `terrace.test/test/files` 0.1.0.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::workspace_root;

/// The provider's source address in a configuration's `required_providers`.
pub const SOURCE: &str = "terrace.test/test/files";
const VERSION: &str = "0.1.0";

/// The mirror directory that holds the built provider (built once per test process;
/// cargo's own lock orders test processes building at once).
pub fn mirror() -> &'static Path {
    static MIRROR: OnceLock<PathBuf> = OnceLock::new();
    MIRROR.get_or_init(build)
}

/// A CLI configuration (`TF_CLI_CONFIG_FILE`) body that installs the provider from the
/// mirror and everything else as usual.
pub fn cli_config() -> String {
    let path = mirror().display().to_string();
    format!(
        "provider_installation {{\n  filesystem_mirror {{\n    path    = \"{path}\"\n    \
         include = [\"terrace.test/*/*\"]\n  }}\n  direct {{\n    exclude = [\"terrace.test/*/*\"]\n  }}\n}}\n"
    )
}

/// A configuration's `terraform` block's `required_providers` entry and the provider
/// block for objects in `root`.
pub fn hcl(root: &Path) -> (String, String) {
    (
        format!("files = {{\n      source = \"{SOURCE}\"\n    }}"),
        format!(
            "provider \"files\" {{\n  root = \"{}\"\n}}\n",
            root.display()
        ),
    )
}

fn build() -> PathBuf {
    let root = workspace_root();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("test-provider");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--quiet", "--manifest-path"])
        .arg(root.join("tests/provider/Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .output()
        .expect("cargo build the test provider");
    assert!(
        out.status.success(),
        "the test provider (tests/provider) did not build (it needs protoc, \
         apt-get install protobuf-compiler):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mirror = target.join("mirror");
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let dir = mirror
        .join(SOURCE)
        .join(VERSION)
        .join(format!("linux_{arch}"));
    std::fs::create_dir_all(&dir).expect("mirror dir");
    let installed = dir.join(format!("terraform-provider-files_v{VERSION}"));
    // A copy, replaced whole (a process may be running the old one).
    let tmp = dir.join(format!(".new-{}", std::process::id()));
    std::fs::copy(target.join("debug/terraform-provider-files"), &tmp).expect("copy provider");
    std::fs::rename(&tmp, &installed).expect("install provider");
    mirror
}

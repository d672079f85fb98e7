//! Which blob store terrace uses: one set of flags (and `TERRACE_*` environment
//! variables), flattened into the settings of `terrace api-server`, `terrace operator`
//! and `terrace dev` so all three read the same configuration. S3 credentials are not
//! flags: they come from the standard AWS environment (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, web identity, container credentials).

use clap::Args;

/// Where blobs live: `cluster` (compressed chunk Secrets, the default) or an
/// S3-compatible bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Location {
    /// Chunked Secrets in each organization's namespace.
    #[default]
    Cluster,
    /// A bucket, with keys under `prefix` (no leading or trailing `/`; may be empty).
    S3 { bucket: String, prefix: String },
}

impl Location {
    /// Parses `cluster` (or the older `secrets`) or `s3://BUCKET[/PREFIX]`.
    pub fn parse(s: &str) -> Result<Location, String> {
        let s = s.trim();
        if s == "cluster" || s == "secrets" {
            return Ok(Location::Cluster);
        }
        let rest = s
            .strip_prefix("s3://")
            .ok_or_else(|| format!("{s:?}: expected `cluster` or `s3://BUCKET[/PREFIX]`"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
        if !bucket_ok {
            return Err(format!(
                "{s:?}: the bucket name must be 3 to 63 lowercase letters, digits, `-` or `.`"
            ));
        }
        let prefix = prefix.trim_matches('/');
        if prefix.split('/').any(|p| p == "." || p == "..")
            || prefix.contains("//")
            || prefix.chars().any(|c| c.is_control())
        {
            return Err(format!("{s:?}: the prefix has an empty, `.` or `..` part"));
        }
        Ok(Location::S3 {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
        })
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Cluster => f.write_str("cluster"),
            Location::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            Location::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

/// The blob store flags.
#[derive(Clone, Debug, Default, Args)]
pub struct BlobStoreSettings {
    /// Where configuration archives and state files are kept: `cluster` (compressed
    /// chunk Secrets in the organization's namespace) or `s3://BUCKET[/PREFIX]` (an
    /// S3-compatible bucket; credentials from the AWS environment: AWS_ACCESS_KEY_ID,
    /// AWS_SECRET_ACCESS_KEY, web identity). The API server and the operator need the
    /// same value.
    #[arg(
        long = "blob-store",
        env = "TERRACE_BLOB_STORE",
        default_value = "cluster",
        value_parser = Location::parse
    )]
    pub location: Location,
    /// URL of the S3-compatible server (MinIO, Ceph RGW, a gateway); `http://` is allowed.
    /// Default: AWS S3 of --s3-region. Without --s3-path-style the URL must be the
    /// bucket's own host (`https://BUCKET.HOST`).
    #[arg(long, env = "TERRACE_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    /// Region of the bucket (default: AWS_DEFAULT_REGION, else us-east-1).
    #[arg(long, env = "TERRACE_S3_REGION")]
    pub s3_region: Option<String>,
    /// Address the bucket in the path (`ENDPOINT/BUCKET/KEY`) rather than in the host name
    /// (most S3-compatible servers need this).
    #[arg(long, env = "TERRACE_S3_PATH_STYLE")]
    pub s3_path_style: bool,
}

impl BlobStoreSettings {
    /// Whether blobs live in a bucket.
    pub fn is_s3(&self) -> bool {
        matches!(self.location, Location::S3 { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        blobs: BlobStoreSettings,
    }

    #[test]
    fn locations() {
        assert_eq!(Location::parse("cluster"), Ok(Location::Cluster));
        assert_eq!(Location::parse("secrets"), Ok(Location::Cluster));
        assert_eq!(
            Location::parse("s3://terrace-blobs/prod/eu/"),
            Ok(Location::S3 {
                bucket: "terrace-blobs".into(),
                prefix: "prod/eu".into()
            })
        );
        assert_eq!(
            Location::parse("s3://bkt").map(|l| l.to_string()),
            Ok("s3://bkt".to_owned())
        );
        for bad in [
            "s3://",
            "s3://Upper",
            "gs://b",
            "s3://bkt/a//b",
            "s3://bkt/../x",
            "",
        ] {
            assert!(Location::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn flags() {
        let cli = Cli::try_parse_from(["x"]).expect("parse");
        assert_eq!(cli.blobs.location, Location::Cluster);
        assert!(!cli.blobs.s3_path_style && !cli.blobs.is_s3());
        let cli = Cli::try_parse_from([
            "x",
            "--blob-store",
            "s3://b-1/p",
            "--s3-endpoint",
            "http://127.0.0.1:9000",
            "--s3-path-style",
            "--s3-region",
            "eu-west-1",
        ])
        .expect("parse");
        assert!(cli.blobs.is_s3() && cli.blobs.s3_path_style);
        assert_eq!(cli.blobs.s3_region.as_deref(), Some("eu-west-1"));
    }
}

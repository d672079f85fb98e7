//! Engine versions: whether an engine's version satisfies a workspace's
//! `terraform-version` constraint, and the exact version a constraint names.

/// Whether engine version `version` (`1.11.4`) satisfies a workspace's
/// `terraform-version`: an exact version, `latest` (anything), or a constraint of
/// comma-separated `=`, `!=`, `>`, `>=`, `<`, `<=` and `~>` terms (`~> 1.11` allows 1.x
/// from 1.11, `~> 1.11.0` allows 1.11.x). `Err` says what does not parse.
pub fn version_satisfies(constraint: &str, version: &str) -> Result<bool, String> {
    fn parse(v: &str) -> Option<Vec<u64>> {
        let core = v.trim().trim_start_matches('v');
        let core = core.split(['-', '+']).next()?;
        let parts: Option<Vec<u64>> = core.split('.').map(|p| p.parse().ok()).collect();
        parts.filter(|p| !p.is_empty() && p.len() <= 3)
    }
    let pad = |mut v: Vec<u64>| {
        v.resize(3, 0);
        v
    };
    let have = parse(version)
        .map(pad)
        .ok_or_else(|| format!("engine version {version:?} is not a version"))?;
    let constraint = constraint.trim();
    if constraint.is_empty() || constraint == "latest" {
        return Ok(true);
    }
    for term in constraint.split(',') {
        let term = term.trim();
        let (op, rest) = ["~>", ">=", "<=", "!=", "=", ">", "<"]
            .iter()
            .find_map(|op| term.strip_prefix(op).map(|r| (*op, r)))
            .unwrap_or(("=", term));
        let given = parse(rest).ok_or_else(|| format!("{term:?} is not a version constraint"))?;
        let want = pad(given.clone());
        let ok = match op {
            "=" => have == want,
            "!=" => have != want,
            ">" => have > want,
            ">=" => have >= want,
            "<" => have < want,
            "<=" => have <= want,
            _ => {
                // Pessimistic: at least `want`, and the same leading parts but the last given.
                let fixed = given.len().saturating_sub(1).max(1);
                have >= want && have[..fixed] == want[..fixed]
            }
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The exact version a `terraform-version` names (`1.11.4`, not a constraint).
pub fn exact_version(constraint: &str) -> Option<&str> {
    let c = constraint.trim().trim_start_matches('=').trim();
    (!c.is_empty()
        && c.chars().all(|ch| ch.is_ascii_digit() || ch == '.')
        && c.split('.').count() == 3)
        .then_some(c)
}

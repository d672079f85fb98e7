//! CEL `x-kubernetes-validations` rules of custom resource schemas, evaluated the way
//! apiextensions-apiserver's `schema/cel` validator does, with the `cel` crate (0.13, through
//! kube-cel's re-export) and kube-cel's port of the Kubernetes CEL libraries.
//!
//! Rules are compiled when the CRD is registered ([`compile_rules`], called by
//! [`crate::schema::Structural::from_crd_schema`]): a rule that does not parse, or that names
//! a variable or function this evaluator does not provide, rejects the CRD, as kube-apiserver
//! rejects CRDs with rules that do not compile. On every write, the schema's walk
//! ([`crate::schema::Structural::validate`]) walks the
//! object with its schema and evaluates each node's rules with `self` bound to the node's
//! value and, for transition rules (rules that mention `oldSelf`), `oldSelf` bound to the
//! correlated old value (same key in objects and granular maps, same key fields in
//! `x-kubernetes-list-type: map` lists). Transition rules are skipped when there is no old
//! value (create, or a node without counterpart), like the real validator. Failures become
//! [`FieldError`]s in the real format: `spec: Invalid value: "object": <message>`, at
//! `fieldPath` when the rule sets one, with `reason` honoured; rules on the root object are
//! reported at `<nil>` as kube-apiserver does. On update, a non-transition rule failing on a
//! value equal to the old one is dropped (ratcheting; real sends it as a warning).
//!
//! Runtime evaluation errors (for example `no such key: x` when a rule reads an absent
//! field without `has()`) are reported as `FieldValueInvalid` with the real wording
//! `<error> evaluating rule: <rule>`; an overload error reads `'no such overload': call
//! arguments did not match a supported operator, function or macro signature for rule:
//! <rule>`.
//!
//! # Known to work
//! - `self` / `oldSelf`, field selection, `has(self.field)`, `self['key']` on maps,
//!   property names escaped as Kubernetes does (`self.foo__dash__bar`, `self.__namespace__`)
//! - `==`, `!=`, `<`, `<=`, `>`, `>=`, `&&`, `||`, `!`, ternary `?:`, arithmetic, `in`
//! - `size()`, `matches()`, `startsWith()`, `endsWith()`, `contains()`, `int()`, `uint()`,
//!   `double()`, `string()`, `bytes()`, `duration()`, `timestamp()` and its getters,
//!   optionals (`optional.of`, `hasValue`, `orValue`, ...)
//! - macros `all`, `exists`, `exists_one`, `map`, `filter`
//! - kube-cel's libraries: strings (`lowerAscii`, `split`, `substring`, `format`, ...),
//!   lists (`isSorted`, `sum`, `min`, `max`, `indexOf`, `slice`, ...), sets (`sets.*`),
//!   regex (`find`, `findAll`), `url()`, `ip()`/`cidr()`, `quantity()`, `semver()`,
//!   `format.*` named formats, `math.*`, `base64.*`, `jsonpatch.escapeKey`
//! - `messageExpression` (a string result; blank or multi-line results fall back to
//!   `message`), `fieldPath`, `reason`, root-level `apiVersion`/`kind`/`metadata.name`/
//!   `metadata.generateName`
//!
//! # Known not to work (differences from kube-apiserver)
//! - No type checking at registration: a rule selecting a field the schema does not
//!   declare compiles here (real: "undefined field") and fails at runtime with
//!   `no such key`; a rule whose result is not a bool fails at runtime instead of at
//!   registration. Compile errors are the cel crate's parser messages, not cel-go's.
//! - No cost estimation or runtime cost budget.
//! - Not provided (a CRD using them is rejected at registration with "undeclared
//!   reference"): `type()`, `dyn()`, `bool()`, type identifiers (`int`, `string`, ...),
//!   `cel.bind`.
//! - `optionalOldSelf: true` rules are skipped when there is no old value (real: evaluated
//!   with `oldSelf` as an empty optional).
//! - Strings with `format: date-time`/`duration`/`byte` are plain strings in CEL (real:
//!   `timestamp`/`duration`/`bytes` values).
//! - Fields of objects with `x-kubernetes-preserve-unknown-fields` that the schema does not
//!   declare are visible to rules (real: not accessible).

use crate::gofmt::go_quote;
use kube_cel::KubeCelExt;
use kube_cel::cel::{Context, ExecutionError, Program, Value as CelValue};
use serde_json::Value;
use std::sync::Arc;

/// One compiled `x-kubernetes-validations` entry.
#[derive(Clone, Debug)]
pub struct Rule {
    /// The rule's source.
    pub rule: String,
    /// `message` (trimmed), empty when absent.
    pub message: String,
    /// `fieldPath` normalized (leading `.` removed), empty when absent.
    pub field_path: String,
    /// `reason` as a StatusCause reason, `None` for the default (FieldValueInvalid).
    pub reason: Option<&'static str>,
    /// `optionalOldSelf`.
    pub optional_old_self: bool,
    program: Arc<Program>,
    message_expression: Option<Arc<Program>>,
    uses_old_self: bool,
}

impl Rule {
    /// Whether the rule is a transition rule (mentions `oldSelf`).
    pub fn uses_old_self(&self) -> bool {
        self.uses_old_self
    }
}

thread_local! {
    /// The standard library plus kube-cel's Kubernetes libraries, built once per thread;
    /// each evaluation binds `self`/`oldSelf` in a child scope of it.
    static ROOT: Context<'static> = Context::default().with_all();
}

/// Functions (and operators) a rule may call.
const FUNCTIONS: &[&str] = &[
    // cel crate standard library
    "contains",
    "size",
    "max",
    "min",
    "startsWith",
    "endsWith",
    "string",
    "bytes",
    "double",
    "int",
    "uint",
    "optional.none",
    "optional.of",
    "optional.ofNonZeroValue",
    "value",
    "hasValue",
    "or",
    "orValue",
    "matches",
    "duration",
    "timestamp",
    "getFullYear",
    "getMonth",
    "getDayOfYear",
    "getDayOfMonth",
    "getDate",
    "getDayOfWeek",
    "getHours",
    "getMinutes",
    "getSeconds",
    "getMilliseconds",
    // kube-cel: Kubernetes and cel-go extension libraries
    "add",
    "asApproximateFloat",
    "asInteger",
    "base64.decode",
    "base64.encode",
    "charAt",
    "cidr",
    "compareTo",
    "containsCIDR",
    "containsIP",
    "distinct",
    "family",
    "find",
    "findAll",
    "first",
    "flatten",
    "format",
    "format.byte",
    "format.date",
    "format.datetime",
    "format.dns1035Label",
    "format.dns1035LabelPrefix",
    "format.dns1123Label",
    "format.dns1123LabelPrefix",
    "format.dns1123Subdomain",
    "format.dns1123SubdomainPrefix",
    "format.labelValue",
    "format.named",
    "format.qualifiedName",
    "format.uri",
    "format.uuid",
    "getEscapedPath",
    "getHost",
    "getHostname",
    "getPort",
    "getQuery",
    "getScheme",
    "indexOf",
    "ip",
    "ip.isCanonical",
    "isCIDR",
    "isCIDRv4",
    "isCIDRv6",
    "isGlobalUnicast",
    "isGreaterThan",
    "isIP",
    "isIPv4",
    "isIPv6",
    "isInteger",
    "isLessThan",
    "isLinkLocalMulticast",
    "isLinkLocalUnicast",
    "isLoopback",
    "isQuantity",
    "isSemver",
    "isSorted",
    "isURL",
    "isUnspecified",
    "join",
    "jsonpatch.escapeKey",
    "last",
    "lastIndexOf",
    "lists.range",
    "lowerAscii",
    "major",
    "masked",
    "math.abs",
    "math.bitAnd",
    "math.bitNot",
    "math.bitOr",
    "math.bitShiftLeft",
    "math.bitShiftRight",
    "math.bitXor",
    "math.ceil",
    "math.floor",
    "math.greatest",
    "math.isFinite",
    "math.isInf",
    "math.isNaN",
    "math.least",
    "math.round",
    "math.sign",
    "math.sqrt",
    "math.trunc",
    "minor",
    "patch",
    "prefixLength",
    "quantity",
    "replace",
    "reverse",
    "semver",
    "sets.contains",
    "sets.equivalent",
    "sets.intersects",
    "sign",
    "slice",
    "sort",
    "split",
    "strings.quote",
    "sub",
    "substring",
    "sum",
    "trim",
    "upperAscii",
    "url",
    "validate",
];

/// Identifiers other than variables that may appear: function namespaces.
const IDENTS: &[&str] = &[
    "optional",
    "strings",
    "lists",
    "math",
    "sets",
    "base64",
    "format",
    "ip",
    "jsonpatch",
];

/// Compiles a schema node's `x-kubernetes-validations`; `path` names it in errors.
pub fn compile_rules(validations: &Value, path: &str) -> Result<Vec<Rule>, String> {
    let list = validations.as_array().ok_or_else(|| {
        format!(
            "{path}: Invalid value: {}: must be a list",
            crate::gofmt::render(validations)
        )
    })?;
    let mut rules = Vec::with_capacity(list.len());
    for (i, v) in list.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let get = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let source = get("rule");
        if source.trim().is_empty() {
            return Err(format!("{at}.rule: Required value"));
        }
        let program = compile(&source).map_err(|e| {
            format!(
                "{at}.rule: Invalid value: {}: compilation failed: {e}",
                go_quote(&source)
            )
        })?;
        let uses_old_self = mentions_old_self(&program);
        let message = get("message").trim().to_string();
        if message.contains('\n') {
            return Err(format!(
                "{at}.message: Invalid value: {}: message must not contain line breaks",
                go_quote(&message)
            ));
        }
        let me = get("messageExpression");
        let message_expression = if me.trim().is_empty() {
            None
        } else {
            Some(Arc::new(compile(&me).map_err(|e| {
                format!(
                    "{at}.messageExpression: Invalid value: {}: messageExpression compilation failed: {e}",
                    go_quote(&me)
                )
            })?))
        };
        let reason = match get("reason").as_str() {
            "" => None,
            "FieldValueInvalid" => Some("FieldValueInvalid"),
            "FieldValueForbidden" => Some("FieldValueForbidden"),
            "FieldValueRequired" => Some("FieldValueRequired"),
            "FieldValueDuplicate" => Some("FieldValueDuplicate"),
            other => {
                return Err(format!(
                    "{at}.reason: Unsupported value: {}: supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\"",
                    go_quote(other)
                ));
            }
        };
        let field_path = get("fieldPath");
        let field_path = normalize_field_path(&field_path).map_err(|e| {
            format!(
                "{at}.fieldPath: Invalid value: {}: {e}",
                go_quote(&field_path)
            )
        })?;
        let optional_old_self = v
            .get("optionalOldSelf")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if optional_old_self && !uses_old_self {
            return Err(format!(
                "{at}.optionalOldSelf: Forbidden: may not be set if oldSelf is not used in rule"
            ));
        }
        rules.push(Rule {
            rule: source,
            message,
            field_path,
            reason,
            optional_old_self,
            program: Arc::new(program),
            message_expression,
            uses_old_self,
        });
    }
    Ok(rules)
}

/// `.spec.foo`, `.spec['a.b']`, `.list[0]` → `spec.foo`, `spec['a.b']`, `list[0]`.
fn normalize_field_path(p: &str) -> Result<String, String> {
    if p.is_empty() {
        return Ok(String::new());
    }
    if !p.starts_with('.') && !p.starts_with('[') {
        return Err("fieldPath must be a valid path: expected [ or . at the start".into());
    }
    Ok(p.strip_prefix('.').unwrap_or(p).to_string())
}

fn compile(source: &str) -> Result<Program, String> {
    let program = Program::compile(source).map_err(|e| e.to_string())?;
    check_references(
        program.expression(),
        &mut vec!["self".into(), "oldSelf".into()],
    )?;
    Ok(program)
}

fn mentions_old_self(p: &Program) -> bool {
    p.references().has_variable("oldSelf")
}

/// Rejects identifiers and functions that are neither bound nor provided, with scoping for
/// comprehension variables (which the cel crate's `references()` does not track).
fn check_references(e: &kube_cel::cel::IdedExpr, scope: &mut Vec<String>) -> Result<(), String> {
    use kube_cel::cel::common::ast::{EntryExpr, Expr};
    match &e.expr {
        Expr::Ident(name) => {
            if name.starts_with('@')
                || scope.iter().any(|s| s == name)
                || IDENTS.contains(&name.as_str())
            {
                Ok(())
            } else {
                Err(format!("undeclared reference to '{name}'"))
            }
        }
        Expr::Call(call) => {
            let f = call.func_name.as_str();
            let operator = f.starts_with('_')
                || f.starts_with('@')
                || f.starts_with("!_")
                || f.starts_with("-_");
            // A namespaced function may parse as a call on an identifier target.
            let qualified = match &call.target {
                Some(t) => match &t.expr {
                    Expr::Ident(ns) if !scope.iter().any(|s| s == ns) => Some(format!("{ns}.{f}")),
                    _ => None,
                },
                None => None,
            };
            if let Some(q) = &qualified
                && FUNCTIONS.contains(&q.as_str())
            {
                for a in &call.args {
                    check_references(a, scope)?;
                }
                return Ok(());
            }
            if !operator && !FUNCTIONS.contains(&f) {
                return Err(format!("undeclared reference to '{f}'"));
            }
            if let Some(t) = &call.target {
                check_references(t, scope)?;
            }
            for a in &call.args {
                check_references(a, scope)?;
            }
            Ok(())
        }
        Expr::Comprehension(c) => {
            check_references(&c.iter_range, scope)?;
            check_references(&c.accu_init, scope)?;
            let base = scope.len();
            scope.push(c.iter_var.clone());
            if let Some(v2) = &c.iter_var2 {
                scope.push(v2.clone());
            }
            scope.push(c.accu_var.clone());
            let r = check_references(&c.loop_cond, scope)
                .and_then(|_| check_references(&c.loop_step, scope))
                .and_then(|_| check_references(&c.result, scope));
            scope.truncate(base);
            r
        }
        Expr::List(l) => l
            .elements
            .iter()
            .try_for_each(|x| check_references(x, scope)),
        Expr::Map(m) => m.entries.iter().try_for_each(|entry| match &entry.expr {
            EntryExpr::StructField(f) => check_references(&f.value, scope),
            EntryExpr::MapEntry(me) => {
                check_references(&me.key, scope)?;
                check_references(&me.value, scope)
            }
        }),
        Expr::Select(s) => check_references(&s.operand, scope),
        Expr::Struct(_) => Err("message construction is not supported".into()),
        Expr::Literal(_) | Expr::Unspecified => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------
// Values

/// Kubernetes' escaping of property names into CEL identifiers (apiserver/pkg/cel
/// `Escape`); `None` when the name cannot be accessed from CEL.
pub fn escape(ident: &str) -> Option<String> {
    const RESERVED: &[&str] = &[
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ];
    let first = ident.chars().next()?;
    if first.is_ascii_digit() {
        return None;
    }
    if RESERVED.contains(&ident) {
        return Some(format!("__{ident}__"));
    }
    let mut out = String::with_capacity(ident.len());
    let chars: Vec<char> = ident.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '_' && chars.get(i + 1) == Some(&'_') {
            out.push_str("__underscores__");
            i += 2;
            continue;
        }
        match c {
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c if c.is_ascii_alphanumeric() || c == '_' => out.push(c),
            _ => return None,
        }
        i += 1;
    }
    Some(out)
}

/// What one rule says of the node it is evaluated on.
pub enum Verdict {
    /// The rule holds.
    Holds,
    /// The rule returned false (or anything but `true`): [`Rule::failure_detail`] says why.
    Fails,
    /// The evaluation errored, in cel-go's words as the validator wraps them.
    Errs(String),
}

/// Runs `f` with a context of the standard and Kubernetes libraries where `self` is
/// `self_value` and, for transition rules, `oldSelf` is `old_value`.
pub fn with_self<R>(
    self_value: CelValue,
    old_value: Option<CelValue>,
    f: impl FnOnce(&Context<'_>) -> R,
) -> R {
    ROOT.with(|root_ctx| {
        let mut ctx = root_ctx.new_inner_scope();
        ctx.add_variable_from_value("self", self_value);
        if let Some(o) = old_value {
            ctx.add_variable_from_value("oldSelf", o);
        }
        f(&ctx)
    })
}

impl Rule {
    /// Evaluates the rule in `ctx` (see [`with_self`]).
    pub fn verdict(&self, ctx: &Context<'_>) -> Verdict {
        match self.program.execute(ctx) {
            Ok(CelValue::Bool(true)) => Verdict::Holds,
            Ok(_) => Verdict::Fails,
            Err(e) => Verdict::Errs(runtime_error(&e, self)),
        }
    }

    /// The message of a failure: `messageExpression`'s (a one-line, non-blank string),
    /// else `message`, else `failed rule: <rule>`.
    pub fn failure_detail(&self, ctx: &Context<'_>) -> String {
        self.message_expression
            .as_ref()
            .and_then(|me| match me.execute(ctx) {
                Ok(CelValue::String(text)) if !text.trim().is_empty() && !text.contains('\n') => {
                    Some(text.trim().to_string())
                }
                _ => None,
            })
            .unwrap_or_else(|| {
                if self.message.is_empty() {
                    format!("failed rule: {}", self.rule.trim())
                } else {
                    self.message.clone()
                }
            })
    }
}

/// A runtime error in cel-go's words, as the validator wraps it.
fn runtime_error(e: &ExecutionError, rule: &Rule) -> String {
    let rule_text = if rule.message.is_empty() {
        rule.rule.trim()
    } else {
        rule.message.as_str()
    };
    match e {
        ExecutionError::NoSuchOverload
        | ExecutionError::ValuesNotComparable(_, _)
        | ExecutionError::UnsupportedBinaryOperator(..) => {
            format!(
                "'no such overload': call arguments did not match a supported operator, function or macro signature for rule: {rule_text}"
            )
        }
        ExecutionError::NoSuchKey(k) => format!("no such key: {k} evaluating rule: {rule_text}"),
        ExecutionError::IndexOutOfBounds(i) => {
            format!(
                "index out of bounds: {} evaluating rule: {rule_text}",
                cel_text(i)
            )
        }
        ExecutionError::DivisionByZero(_) => {
            format!("division by zero evaluating rule: {rule_text}")
        }
        ExecutionError::RemainderByZero(_) => {
            format!("modulus by zero evaluating rule: {rule_text}")
        }
        ExecutionError::Overflow(..) => format!("integer overflow evaluating rule: {rule_text}"),
        other => format!("{other} evaluating rule: {rule_text}"),
    }
}

fn cel_text(v: &CelValue) -> String {
    match v {
        CelValue::Int(i) => i.to_string(),
        CelValue::UInt(u) => u.to_string(),
        CelValue::String(s) => s.to_string(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests;

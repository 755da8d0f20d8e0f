//! RFC 6570 URI-template expansion for resource templates, with iri-string.

use std::collections::BTreeMap;

use hostpipe_core::{ArgumentValue, VariableRef, Variables};
use iri_string::spec::UriSpec;
use iri_string::template::UriTemplateStr;
use iri_string::template::simple_context::SimpleContext;

/// Why a template could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateError {
    /// Not a valid RFC 6570 template.
    #[error("`{template}` is not a valid URI template: {message}")]
    Invalid {
        /// The template.
        template: String,
        /// The parser's message.
        message: String,
    },
    /// A variable of the template has no value.
    #[error("template `{template}` needs variable `{variable}`, which has no value{}", from_var.as_ref().map(|v| format!(" (turn variable `{v}` is not set)")).unwrap_or_default())]
    Missing {
        /// The template.
        template: String,
        /// The template variable.
        variable: String,
        /// The turn variable it was to come from, if any.
        from_var: Option<String>,
    },
}

/// Whether `uri` could be an expansion of `template` (RFC 6570): its literal parts in
/// order, each expression standing for what its operator can produce (`{x}` a run
/// without `/`, `?` or `#`; `{+x}` and `{#x}` anything; `{/x}` path segments; `{?x}` and
/// `{&x}` a query). Used to find the template a URI the model read was made from, for
/// its listing's name, MIME type and audience; a near miss only loses that description.
pub fn matches(template: &str, uri: &str) -> bool {
    let mut pattern = String::from("^");
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        pattern.push_str(&regex::escape(&rest[..open]));
        let Some(close) = rest[open..].find('}') else {
            return false;
        };
        let expr = &rest[open + 1..open + close];
        pattern.push_str(match expr.chars().next() {
            Some('+' | '#') => ".*",
            Some('/') => "(?:/[^/?#]*)*",
            Some('.') => r"(?:\.[^/?#.]*)*",
            Some(';') => "(?:;[^/?#]*)*",
            Some('?' | '&') => r"(?:[?&][^#]*)?",
            _ => "[^/?#]*",
        });
        rest = &rest[open + close + 1..];
    }
    pattern.push_str(&regex::escape(rest));
    pattern.push('$');
    regex::Regex::new(&pattern).is_ok_and(|r| r.is_match(uri))
}

/// The variable names of `template`, in order of first appearance.
///
/// # Errors
/// [`TemplateError::Invalid`].
pub fn variables(template: &str) -> Result<Vec<String>, TemplateError> {
    parse(template).map(variables_of)
}

fn parse(template: &str) -> Result<&UriTemplateStr, TemplateError> {
    // iri-string 0.7.14 panics on a `%` followed by a non-ASCII character (it splits
    // the string two bytes on). RFC 6570 §2.1 allows `%` only as a pct-encoded triplet,
    // so such a template is invalid: say so first.
    let bytes = template.as_bytes();
    for (i, _) in template.match_indices('%') {
        let ok = bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
            && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit);
        if !ok {
            return Err(TemplateError::Invalid {
                template: template.to_owned(),
                message: format!(
                    "`%` at byte {i} is not followed by two hex digits (RFC 6570 §2.1)"
                ),
            });
        }
    }
    // It also panics on a prefix length over 65 535; RFC 6570 §2.4.1 allows 1 to 9999.
    for expression in expressions(template) {
        for spec in expression.split(',') {
            if let Some((_, len)) = spec.split_once(':') {
                let ok = (1..=4).contains(&len.len())
                    && len.bytes().all(|b| b.is_ascii_digit())
                    && !len.starts_with('0');
                if !ok {
                    return Err(TemplateError::Invalid {
                        template: template.to_owned(),
                        message: format!(
                            "prefix length `{len}` is not 1 to 9999 (RFC 6570 §2.4.1)"
                        ),
                    });
                }
            }
        }
    }
    UriTemplateStr::new(template).map_err(|e| TemplateError::Invalid {
        template: template.to_owned(),
        message: e.to_string(),
    })
}

/// Resolves `arguments` against the turn's `variables` and expands `template`.
/// Values are percent-encoded as RFC 6570 says for each operator: in `{var}` every
/// character outside the unreserved set is encoded, so `a b/ç` becomes `a%20b%2F%C3%A7`
/// and a value can never add a path segment.
///
/// Returns the URI and the resolved values.
///
/// # Errors
/// [`TemplateError`] for an invalid template or a variable without a value.
pub fn expand(
    template: &str,
    arguments: &BTreeMap<String, ArgumentValue>,
    variables: &Variables,
) -> Result<(String, BTreeMap<String, String>), TemplateError> {
    let parsed = parse(template)?;
    let Uses {
        reserved,
        plain,
        prefixed,
    } = uses(template);
    let mut resolved = BTreeMap::new();
    let mut context = SimpleContext::new();
    for name in variables_of(parsed) {
        let value = match arguments.get(&name) {
            Some(ArgumentValue::Literal(v)) => v.clone(),
            Some(ArgumentValue::Variable(VariableRef { var, default })) => {
                match variables
                    .get(var)
                    .map(str::to_owned)
                    .or_else(|| default.clone())
                {
                    Some(v) => v,
                    None => {
                        return Err(TemplateError::Missing {
                            template: template.to_owned(),
                            variable: name,
                            from_var: Some(var.clone()),
                        });
                    }
                }
            }
            None => {
                return Err(TemplateError::Missing {
                    template: template.to_owned(),
                    variable: name,
                    from_var: None,
                });
            }
        };
        // iri-string 0.7.14 panics on a non-ASCII character in a `{+var}` or `{#var}`
        // value (it slices inside the character). RFC 6570 §3.2.3 encodes such a
        // character as its UTF-8 triplets there, and keeps triplets as they are, so
        // encoding it first gives the same URI.
        let has_non_ascii = !value.is_ascii();
        // iri-string 0.7.14 miscounts a prefix (`{var:3}`) of a non-ASCII value (bytes
        // for characters) and panics or cuts wrongly; refuse rather than guess.
        if has_non_ascii && prefixed.contains(&name) {
            return Err(TemplateError::Invalid {
                template: template.to_owned(),
                message: format!(
                    "variable `{name}` has a prefix modifier, which cannot take a value with non-ASCII characters here"
                ),
            });
        }
        if reserved.contains(&name) {
            if has_non_ascii && plain.contains(&name) {
                return Err(TemplateError::Invalid {
                    template: template.to_owned(),
                    message: format!(
                        "variable `{name}` is expanded both with and without `+`/`#`, so its value cannot hold non-ASCII characters"
                    ),
                });
            }
            context.insert(
                name.clone(),
                encode_non_ascii(&defuse_stray_percents(&value)).as_str(),
            );
        } else {
            context.insert(name.clone(), value.as_str());
        }
        resolved.insert(name, value);
    }
    let uri = parsed
        .expand::<UriSpec, _>(&context)
        .map_err(|e| TemplateError::Invalid {
            template: template.to_owned(),
            message: e.to_string(),
        })?
        .to_string();
    Ok((uri, resolved))
}

/// How the variables of (an already validated) template are used.
#[derive(Default)]
struct Uses {
    /// In reserved (`+`) or fragment (`#`) expressions.
    reserved: Vec<String>,
    /// In any other expression.
    plain: Vec<String>,
    /// With a prefix modifier (`{var:3}`).
    prefixed: Vec<String>,
}

/// The text between each `{` and the next `}` of `template`, in order.
fn expressions(template: &str) -> impl Iterator<Item = &str> {
    let mut rest = template;
    std::iter::from_fn(move || {
        let open = rest.find('{')?;
        let close = rest[open..].find('}')?;
        let expression = &rest[open + 1..open + close];
        rest = &rest[open + close + 1..];
        Some(expression)
    })
}

fn uses(template: &str) -> Uses {
    let mut uses = Uses::default();
    for expression in expressions(template) {
        let (list, reserved) = match expression.as_bytes().first() {
            Some(b'+' | b'#') => (&expression[1..], true),
            Some(b'.' | b'/' | b';' | b'?' | b'&' | b'=' | b',' | b'!' | b'@' | b'|') => {
                (&expression[1..], false)
            }
            _ => (expression, false),
        };
        for spec in list.split(',') {
            let (name, prefix) = match spec.split_once(':') {
                Some((n, _)) => (n, true),
                None => (spec.trim_end_matches('*'), false),
            };
            if reserved {
                uses.reserved.push(name.to_owned());
            } else {
                uses.plain.push(name.to_owned());
            }
            if prefix {
                uses.prefixed.push(name.to_owned());
            }
        }
    }
    uses
}

/// `value` with every `%` that does not start a pct-encoded triplet, or whose run of
/// triplets does not decode to UTF-8, written `%25`. A `{+var}` value keeps its
/// triplets (RFC 6570 §3.2.3), and iri-string 0.7.14 panics on a run that is not UTF-8;
/// such a `%` is a literal percent sign, which is what `%25` says.
fn defuse_stray_percents(value: &str) -> String {
    let bytes = value.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = String::with_capacity(value.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            let next = value[i..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&value[i..i + next]);
            i += next;
            continue;
        }
        let mut decoded = Vec::new();
        let mut j = i;
        while j + 2 < bytes.len() && bytes[j] == b'%' {
            match (hex(bytes[j + 1]), hex(bytes[j + 2])) {
                (Some(h), Some(l)) => {
                    decoded.push(u8::try_from(h * 16 + l).unwrap_or(0));
                    j += 3;
                }
                _ => break,
            }
        }
        if j == i {
            out.push_str("%25");
            i += 1;
        } else if std::str::from_utf8(&decoded).is_ok() {
            out.push_str(&value[i..j]);
            i = j;
        } else {
            out.push_str(&value[i..j].replace('%', "%25"));
            i = j;
        }
    }
    out
}

/// `value` with every non-ASCII character replaced by its UTF-8 percent triplets.
fn encode_non_ascii(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 8);
    for c in value.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

fn variables_of(t: &UriTemplateStr) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for v in t.variables() {
        if !names.iter().any(|n| n == v.as_str()) {
            names.push(v.as_str().to_owned());
        }
    }
    names
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_uri_matches_the_template_it_was_expanded_from() {
        use super::matches;
        assert!(matches("demo://docs/{topic}", "demo://docs/deployment"));
        assert!(!matches("demo://docs/{topic}", "demo://docs/a/b"));
        assert!(matches("file:///{+path}", "file:///home/a/b.md"));
        assert!(matches("kb://search{?q,lang}", "kb://search?q=x&lang=en"));
        assert!(matches("kb://search{?q,lang}", "kb://search"));
        assert!(!matches("kb://a/{x}", "kb://b/y"));
        assert!(matches("s://{a}.{b}/{c}", "s://x.y/z"));
    }

    use super::*;

    fn lit(pairs: &[(&str, &str)]) -> BTreeMap<String, ArgumentValue> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ArgumentValue::Literal((*v).to_owned())))
            .collect()
    }

    #[test]
    fn simple_values_are_percent_encoded() {
        let (uri, _) = expand(
            "greeting://{name}",
            &lit(&[("name", "a b/ç")]),
            &Variables::new(),
        )
        .unwrap_or_default();
        assert_eq!(uri, "greeting://a%20b%2F%C3%A7");
    }

    #[test]
    fn dot_dot_stays_inside_its_segment() {
        let (uri, _) = expand(
            "file:///docs/{name}.md",
            &lit(&[("name", "../etc/passwd")]),
            &Variables::new(),
        )
        .unwrap_or_default();
        assert_eq!(uri, "file:///docs/..%2Fetc%2Fpasswd.md");
    }

    #[test]
    fn variables_come_from_the_turn_with_defaults() {
        let args: BTreeMap<_, _> = [(
            "id".to_owned(),
            ArgumentValue::Variable(VariableRef {
                var: "user".into(),
                default: None,
            }),
        )]
        .into();
        let vars: Variables = [("user", "42")].into_iter().collect();
        assert_eq!(
            expand("user://{id}", &args, &vars).map(|r| r.0),
            Ok("user://42".to_owned())
        );
        let missing = expand("user://{id}", &args, &Variables::new()).err();
        assert_eq!(
            missing.map(|e| e.to_string()).as_deref(),
            Some(
                "template `user://{id}` needs variable `id`, which has no value (turn variable `user` is not set)"
            )
        );
        assert!(matches!(
            expand("user://{id}", &BTreeMap::new(), &vars),
            Err(TemplateError::Missing { .. })
        ));
    }

    #[test]
    fn reserved_expansion_encodes_non_ascii_and_keeps_slashes() {
        let vars = Variables::new();
        let expand1 = |t: &str, v: &str| expand(t, &lit(&[("p", v)]), &vars).map(|r| r.0);
        assert_eq!(expand1("f://{+p}", "ç/x y"), Ok("f://%C3%A7/x%20y".into()));
        assert_eq!(expand1("f://a{#p}", "ç"), Ok("f://a#%C3%A7".into()));
        assert_eq!(expand1("f://{+p}", "%C3%A7"), Ok("f://%C3%A7".into()));
        assert!(matches!(
            expand1("f://{p}/{+p}", "ç"),
            Err(TemplateError::Invalid { .. })
        ));
        assert_eq!(expand1("f://{p}/{+p}", "a/b"), Ok("f://a%2Fb/a/b".into()));
    }

    proptest::proptest! {
        /// No value panics any operator, and a `{simple}` value never adds a segment.
        #[test]
        fn any_value_expands_without_panic(value in "\\PC{0,12}", op in "[+#./;?&]?") {
            let template = format!("x://h/{{{op}p}}/end");
            let vars = Variables::new();
            let result = expand(&template, &lit(&[("p", value.as_str())]), &vars);
            if op.is_empty() {
                let uri = result.map(|r| r.0).unwrap_or_default();
                proptest::prop_assert_eq!(uri.matches('/').count(), 4, "{}", uri);
            }
        }
    }

    #[test]
    fn lists_variables_and_rejects_bad_templates() {
        assert_eq!(
            variables("x://{a}/{+b}{?c,a}"),
            Ok(vec!["a".into(), "b".into(), "c".into()])
        );
        assert!(matches!(
            variables("x://{a"),
            Err(TemplateError::Invalid { .. })
        ));
        // A `%` before a non-ASCII character: invalid, not a panic in iri-string.
        assert!(matches!(
            variables("#%pçf://a{"),
            Err(TemplateError::Invalid { .. })
        ));
        assert!(variables("x://%C3%A7/{a}").is_ok());
        // A prefix length past u16: an error, not iri-string's `expect`.
        assert!(matches!(
            variables("{vm:66666}{+p}"),
            Err(TemplateError::Invalid { .. })
        ));
        assert!(variables("x://{v:9999}").is_ok());
        // Reserved values: valid triplets kept, stray or non-UTF-8 ones made literal.
        let reserved =
            |v: &str| expand("f://{+p}", &lit(&[("p", v)]), &Variables::new()).map(|r| r.0);
        assert_eq!(reserved("a%2Fb"), Ok("f://a%2Fb".into()));
        assert_eq!(reserved("100%"), Ok("f://100%25".into()));
        assert_eq!(reserved("%F2%%"), Ok("f://%25F2%25%25".into()));
        assert_eq!(reserved("%C3%A7"), Ok("f://%C3%A7".into()));
        // A prefix of a non-ASCII value: an error, not iri-string's overflow.
        assert!(matches!(
            expand("x://{v:3}", &lit(&[("v", "ççç")]), &Variables::new()),
            Err(TemplateError::Invalid { .. })
        ));
        assert_eq!(
            expand("x://{v:3}", &lit(&[("v", "abcdef")]), &Variables::new()).map(|r| r.0),
            Ok("x://abc".to_owned())
        );
    }
}

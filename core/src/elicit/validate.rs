//! Form content checked against the restricted schema of MCP 2025-11-25
//! `client/elicitation` ("Requested Schema"): a flat `object` whose properties are
//! primitives: `string` (`minLength`, `maxLength`, `format` `email`/`uri`/`date`/
//! `date-time`, `enum`, titled `oneOf` of `const`s), `number` and `integer` (`minimum`,
//! `maximum`), `boolean`, and `array` multi-select enums (`items.enum` or titled
//! `items.anyOf`, `minItems`, `maxItems`), with a `required` list. Nothing else is
//! accepted, so nothing unexpected is sent to a server.

use serde_json::{Map, Value};

/// Why content (or a schema) was refused: the field and what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{field}`: {problem}")]
pub struct ContentError {
    /// The property name (empty for the form as a whole).
    pub field: String,
    /// What was wrong, for the user: e.g. "is required", "must be at most 100".
    pub problem: String,
}

fn err(field: &str, problem: impl Into<String>) -> ContentError {
    ContentError {
        field: field.to_owned(),
        problem: problem.into(),
    }
}

/// The schema's properties (`None`: it names none).
fn properties(schema: &Value) -> Result<Option<&Map<String, Value>>, ContentError> {
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(err("", "the requested schema is not of type `object`"));
    }
    match schema.get("properties") {
        None => Ok(None),
        Some(Value::Object(p)) => Ok(Some(p)),
        Some(_) => Err(err(
            "",
            "the requested schema's `properties` is not an object",
        )),
    }
}

/// The allowed values of a single-select `string` (`enum`, or `oneOf` of `const`s);
/// `None` when the property is free text.
fn choices(property: &Value) -> Option<Vec<&str>> {
    if let Some(Value::Array(values)) = property.get("enum") {
        return Some(values.iter().filter_map(Value::as_str).collect());
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(Value::Array(options)) = property.get(key) {
            return Some(
                options
                    .iter()
                    .filter_map(|o| o.get("const").and_then(Value::as_str))
                    .collect(),
            );
        }
    }
    None
}

/// Whether `schema` is a form hostpipe can ask for (see the module docs).
///
/// # Errors
/// The first property (or the schema itself) that is not of the restricted form.
pub fn validate_schema(schema: &Value) -> Result<(), ContentError> {
    for (name, property) in properties(schema)?.into_iter().flatten() {
        let kind = property.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "string" | "number" | "integer" | "boolean" => {}
            "array" => {
                let items = property.get("items").unwrap_or(&Value::Null);
                if choices(items).is_none() {
                    return Err(err(
                        name,
                        "an array property must be a multi-select enum (`items.enum` or `items.anyOf`)",
                    ));
                }
            }
            other => {
                return Err(err(
                    name,
                    format!("type `{other}` is not a primitive type a form can ask for"),
                ));
            }
        }
    }
    if let Some(required) = schema.get("required")
        && !required
            .as_array()
            .is_some_and(|r| r.iter().all(Value::is_string))
    {
        return Err(err("", "`required` must be a list of property names"));
    }
    Ok(())
}

/// Checks `content` (the user's answers by property name) against `schema`: every
/// required property present, no property the schema does not name, every value of its
/// property's type and within its bounds, format and choices.
///
/// # Errors
/// The first field that is wrong, and what is wrong with it.
pub fn validate_content(schema: &Value, content: &Map<String, Value>) -> Result<(), ContentError> {
    validate_schema(schema)?;
    let props = properties(schema)?;
    if let Some(Value::Array(required)) = schema.get("required") {
        for name in required.iter().filter_map(Value::as_str) {
            if !content.contains_key(name) {
                return Err(err(name, "is required"));
            }
        }
    }
    for (name, value) in content {
        let Some(property) = props.and_then(|p| p.get(name)) else {
            return Err(err(name, "is not a field of this form"));
        };
        check_value(name, property, value)?;
    }
    Ok(())
}

/// The user's answers completed with the form's defaults, then checked: a property the
/// user left out that has a `default` gets it (SEP-1034, "Support default values for
/// all primitive types in elicitation schemas": clients apply the defaults of omitted
/// fields), and the result must pass [`validate_content`].
///
/// # Errors
/// As [`validate_content`].
pub fn complete_content(
    schema: &Value,
    mut content: Map<String, Value>,
) -> Result<Map<String, Value>, ContentError> {
    if let Some(props) = properties(schema)? {
        for (name, property) in props {
            if let Some(default) = property.get("default")
                && !content.contains_key(name)
            {
                content.insert(name.clone(), default.clone());
            }
        }
    }
    validate_content(schema, &content)?;
    Ok(content)
}

fn check_value(name: &str, property: &Value, value: &Value) -> Result<(), ContentError> {
    let kind = property.get("type").and_then(Value::as_str).unwrap_or("");
    let num = |key: &str| property.get(key).and_then(Value::as_f64);
    let count = |key: &str| property.get(key).and_then(Value::as_u64);
    match kind {
        "string" => {
            let Some(s) = value.as_str() else {
                return Err(err(name, "must be a string"));
            };
            if let Some(allowed) = choices(property) {
                if !allowed.contains(&s) {
                    return Err(err(name, format!("must be one of: {}", allowed.join(", "))));
                }
                return Ok(());
            }
            let len = s.chars().count() as u64;
            if let Some(min) = count("minLength")
                && len < min
            {
                return Err(err(name, format!("must be at least {min} characters")));
            }
            if let Some(max) = count("maxLength")
                && len > max
            {
                return Err(err(name, format!("must be at most {max} characters")));
            }
            if let Some(format) = property.get("format").and_then(Value::as_str) {
                let ok = match format {
                    "email" => is_email(s),
                    "uri" => is_uri(s),
                    "date" => is_date(s),
                    "date-time" => is_date_time(s),
                    // A format the spec does not list: not checked.
                    _ => true,
                };
                if !ok {
                    return Err(err(name, format!("must be a valid {format}")));
                }
            }
        }
        "number" | "integer" => {
            let Some(n) = value.as_f64() else {
                return Err(err(name, format!("must be a {kind}")));
            };
            if kind == "integer" && !(value.is_i64() || value.is_u64()) {
                return Err(err(name, "must be a whole number"));
            }
            if let Some(min) = num("minimum")
                && n < min
            {
                return Err(err(name, format!("must be at least {min}")));
            }
            if let Some(max) = num("maximum")
                && n > max
            {
                return Err(err(name, format!("must be at most {max}")));
            }
        }
        "boolean" => {
            if !value.is_boolean() {
                return Err(err(name, "must be true or false"));
            }
        }
        "array" => {
            let Some(items) = value.as_array() else {
                return Err(err(name, "must be a list"));
            };
            let allowed =
                choices(property.get("items").unwrap_or(&Value::Null)).unwrap_or_default();
            for item in items {
                if !item.as_str().is_some_and(|s| allowed.contains(&s)) {
                    return Err(err(
                        name,
                        format!("each choice must be one of: {}", allowed.join(", ")),
                    ));
                }
            }
            let n = items.len() as u64;
            if let Some(min) = count("minItems")
                && n < min
            {
                let noun = if min == 1 { "choice" } else { "choices" };
                return Err(err(name, format!("needs at least {min} {noun}")));
            }
            if let Some(max) = count("maxItems")
                && n > max
            {
                let noun = if max == 1 { "choice" } else { "choices" };
                return Err(err(name, format!("allows at most {max} {noun}")));
            }
        }
        other => return Err(err(name, format!("type `{other}` is not supported"))),
    }
    Ok(())
}

fn is_email(s: &str) -> bool {
    let Some((local, domain)) = s.split_once('@') else {
        return false;
    };
    !local.is_empty()
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !domain.contains('@')
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// RFC 3986 §3.1: a scheme (a letter, then letters, digits, `+`, `-`, `.`), `:`, and
/// something after it, with no whitespace.
fn is_uri(s: &str) -> bool {
    let Some((scheme, rest)) = s.split_once(':') else {
        return false;
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        && !rest.is_empty()
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// RFC 3339 `full-date`: `YYYY-MM-DD` with a real day of the month.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let digits = |r: std::ops::Range<usize>| -> Option<u32> {
        s.get(r)
            .filter(|p| p.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|p| p.parse().ok())
    };
    let (Some(y), Some(m), Some(d)) = (digits(0..4), digits(5..7), digits(8..10)) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

/// RFC 3339 `date-time`: a full date, `T`, `hh:mm:ss` (optional fraction), and `Z` or
/// an offset `±hh:mm`.
fn is_date_time(s: &str) -> bool {
    let Some((date, time)) = s.split_once(['T', 't']) else {
        return false;
    };
    if !is_date(date) {
        return false;
    }
    let (clock, offset) = if let Some(c) = time.strip_suffix(['Z', 'z']) {
        (c, "+00:00")
    } else if let Some(i) = time.rfind(['+', '-']) {
        (&time[..i], &time[i + 1..])
    } else {
        return false;
    };
    let hm = |p: &str, max_h: u32| -> bool {
        let mut it = p.split(':');
        let (Some(h), Some(m), None) = (it.next(), it.next(), it.next()) else {
            return false;
        };
        h.len() == 2
            && m.len() == 2
            && h.parse::<u32>().is_ok_and(|h| h <= max_h)
            && m.parse::<u32>().is_ok_and(|m| m <= 59)
    };
    let offset = offset.trim_start_matches('+');
    let (hms, _fraction) = clock.split_once('.').unwrap_or((clock, ""));
    let Some((hm_part, sec)) = hms.rsplit_once(':') else {
        return false;
    };
    hm(hm_part, 23) && sec.len() == 2 && sec.parse::<u32>().is_ok_and(|s| s <= 60) && hm(offset, 23)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 2, "maxLength": 10},
                "email": {"type": "string", "format": "email"},
                "site": {"type": "string", "format": "uri"},
                "born": {"type": "string", "format": "date"},
                "at": {"type": "string", "format": "date-time"},
                "age": {"type": "integer", "minimum": 1, "maximum": 100},
                "score": {"type": "number", "minimum": 0, "maximum": 1},
                "ok": {"type": "boolean"},
                "friend": {"type": "string", "enum": ["Joey", "Ross"]},
                "hero": {"type": "string", "oneOf": [{"const": "h1", "title": "Superman"}]},
                "tools": {"type": "array", "minItems": 1, "maxItems": 2,
                          "items": {"type": "string", "enum": ["a", "b", "c"]}},
                "fish": {"type": "array", "items": {"anyOf": [{"const": "f1", "title": "Tuna"}]}}
            },
            "required": ["name"]
        })
    }

    fn check(content: Value) -> Result<(), ContentError> {
        let Value::Object(map) = content else {
            return Err(err("", "not an object"));
        };
        validate_content(&schema(), &map)
    }

    fn field_of(r: Result<(), ContentError>) -> String {
        r.err().map(|e| e.field).unwrap_or_default()
    }

    #[test]
    fn good_content_passes() {
        assert_eq!(
            check(json!({
                "name": "Ann", "email": "ann@example.com", "site": "https://a.example",
                "born": "2000-02-29", "at": "2026-12-01T10:00:00.5+01:00", "age": 42,
                "score": 0.5, "ok": true, "friend": "Joey", "hero": "h1",
                "tools": ["a", "c"], "fish": ["f1"]
            })),
            Ok(())
        );
    }

    #[test]
    fn each_wrong_field_is_named() {
        let cases = [
            (json!({}), "name", "is required"),
            (json!({"name": "A"}), "name", "at least 2"),
            (json!({"name": 5}), "name", "a string"),
            (json!({"name": "Ann", "x": 1}), "x", "not a field"),
            (
                json!({"name": "Ann", "email": "nope"}),
                "email",
                "valid email",
            ),
            (
                json!({"name": "Ann", "site": "no uri"}),
                "site",
                "valid uri",
            ),
            (
                json!({"name": "Ann", "born": "2001-02-29"}),
                "born",
                "valid date",
            ),
            (
                json!({"name": "Ann", "at": "2026-12-01 10:00"}),
                "at",
                "valid date-time",
            ),
            (json!({"name": "Ann", "age": 101}), "age", "at most 100"),
            (json!({"name": "Ann", "age": 1.5}), "age", "whole number"),
            (json!({"name": "Ann", "score": "1"}), "score", "a number"),
            (json!({"name": "Ann", "ok": "yes"}), "ok", "true or false"),
            (
                json!({"name": "Ann", "friend": "Rachel"}),
                "friend",
                "one of: Joey, Ross",
            ),
            (json!({"name": "Ann", "hero": "h2"}), "hero", "one of: h1"),
            (json!({"name": "Ann", "tools": []}), "tools", "at least 1"),
            (
                json!({"name": "Ann", "tools": ["a", "b", "c"]}),
                "tools",
                "at most 2",
            ),
            (
                json!({"name": "Ann", "tools": ["z"]}),
                "tools",
                "one of: a, b, c",
            ),
            (json!({"name": "Ann", "fish": ["f2"]}), "fish", "one of: f1"),
        ];
        for (content, field, problem) in cases {
            let r = check(content.clone());
            assert_eq!(field_of(r.clone()), field, "{content}");
            let message = r.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(message.contains(problem), "{content}: {message}");
        }
    }

    #[test]
    fn only_flat_primitive_schemas_are_forms() {
        assert!(validate_schema(&json!({"type": "object"})).is_ok());
        assert!(validate_schema(&json!({"type": "string"})).is_err());
        let nested = json!({"type": "object", "properties": {"a": {"type": "object"}}});
        assert_eq!(field_of(validate_schema(&nested)), "a");
        let free_array = json!({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}});
        assert_eq!(field_of(validate_schema(&free_array)), "a");
    }

    #[test]
    fn omitted_fields_take_their_defaults_and_given_ones_stay() {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "verified": {"type": "boolean", "default": true},
                "note": {"type": "string"}
            },
            "required": ["name"]
        });
        let mut given = Map::new();
        given.insert("age".into(), json!(41));
        let done = complete_content(&schema, given).unwrap_or_default();
        assert_eq!(done.get("name"), Some(&json!("John Doe")));
        assert_eq!(done.get("age"), Some(&json!(41)));
        assert_eq!(done.get("verified"), Some(&json!(true)));
        assert_eq!(done.get("note"), None);
        // A default is no excuse for a wrong given value.
        let mut wrong = Map::new();
        wrong.insert("age".into(), json!("old"));
        assert!(complete_content(&schema, wrong).is_err());
    }
}

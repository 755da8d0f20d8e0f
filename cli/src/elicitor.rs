//! The CLI's [`Elicitor`]: a server's question (MCP elicitation) asked on the
//! controlling terminal, by the same [`TerminalApprover`] that asks for consent (one
//! terminal reader, one question at a time).

use async_trait::async_trait;
use hostpipe_core::elicit::complete_content;
use hostpipe_core::{ElicitationAnswer, ElicitationMode, ElicitationRequest, Elicitor};
use serde_json::{Map, Value};

use crate::approver::{TerminalApprover, printable};

/// How many times a form is asked again after an answer that does not fit it.
const FORM_ATTEMPTS: usize = 3;

#[async_trait]
impl Elicitor for TerminalApprover {
    async fn elicit(&self, request: &ElicitationRequest) -> ElicitationAnswer {
        let mut lines = self.lines.lock().await;
        if !self.open(&mut lines) {
            eprintln!(
                "hostpipe: MCP server `{}` asks a question, and there is no terminal to ask: declined",
                printable(&request.server)
            );
            return ElicitationAnswer::Decline;
        }
        let Some(rx) = lines.as_mut() else {
            return ElicitationAnswer::Decline;
        };
        while rx.try_recv().is_ok() {}
        let mut ask = async |text: &str| -> Option<String> {
            if !self.say(text) {
                return None;
            }
            rx.recv()
                .await
                .map(|l| l.trim_end_matches(['\n', '\r']).to_owned())
        };
        let conversation = request
            .conversation
            .as_deref()
            .map(|c| format!(", conversation `{}`", printable(c)))
            .unwrap_or_default();
        let head = format!(
            "\nhostpipe: MCP server `{}` asks (pipeline `{}`{conversation}):\n  \"{}\"\n",
            printable(&request.server),
            printable(&request.pipeline),
            printable(&request.message),
        );
        match &request.mode {
            ElicitationMode::Url { url, domain } => {
                let question = format!(
                    "{head}  It wants you to open a link on  {}  :\n  {}\n  hostpipe does not open it. Will you open it? [y]es, [n]o (decline) or [c]ancel: ",
                    printable(domain),
                    printable(url)
                );
                match ask(&question).await.as_deref().map(choice) {
                    Some(Choice::Yes) => ElicitationAnswer::Accept {
                        content: Map::new(),
                    },
                    Some(Choice::Cancel) => ElicitationAnswer::Cancel,
                    _ => ElicitationAnswer::Decline,
                }
            }
            ElicitationMode::Form { requested_schema } => {
                let question =
                    format!("{head}  Answer the form? [y]es, [n]o (decline) or [c]ancel: ");
                match ask(&question).await.as_deref().map(choice) {
                    Some(Choice::Yes) => {}
                    Some(Choice::Cancel) => return ElicitationAnswer::Cancel,
                    _ => return ElicitationAnswer::Decline,
                }
                let empty = Map::new();
                let props = requested_schema
                    .get("properties")
                    .and_then(Value::as_object)
                    .unwrap_or(&empty);
                let required: Vec<&str> = requested_schema
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                for _ in 0..FORM_ATTEMPTS {
                    let mut content = Map::new();
                    for (name, property) in props {
                        let Some(line) = ask(&field_prompt(
                            name,
                            property,
                            required.contains(&name.as_str()),
                        ))
                        .await
                        else {
                            return ElicitationAnswer::Decline;
                        };
                        if let Some(v) = parse_field(property, &line) {
                            content.insert(name.clone(), v);
                        }
                    }
                    match complete_content(requested_schema, content.clone()) {
                        Ok(content) => return ElicitationAnswer::Accept { content },
                        Err(e) => {
                            if !self.say(&format!("  {e}; please answer again.\n")) {
                                break;
                            }
                        }
                    }
                }
                ElicitationAnswer::Decline
            }
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Choice {
    Yes,
    No,
    Cancel,
}

fn choice(line: &str) -> Choice {
    match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" | "a" | "accept" | "o" | "open" => Choice::Yes,
        "c" | "cancel" => Choice::Cancel,
        _ => Choice::No,
    }
}

/// `  email (string, email, required): Your email address [a, b]: `
fn field_prompt(name: &str, property: &Value, required: bool) -> String {
    let kind = property.get("type").and_then(Value::as_str).unwrap_or("?");
    let mut parts = vec![kind.to_owned()];
    if let Some(f) = property.get("format").and_then(Value::as_str) {
        parts.push(f.to_owned());
    }
    if required {
        parts.push("required".into());
    }
    let description = property
        .get("description")
        .or_else(|| property.get("title"))
        .and_then(Value::as_str)
        .map(|d| format!(" {}", printable(d)))
        .unwrap_or_default();
    let options: Vec<String> = property
        .get("enum")
        .or_else(|| property.get("items").and_then(|i| i.get("enum")))
        .and_then(Value::as_array)
        .map(|v| v.iter().filter_map(Value::as_str).map(printable).collect())
        .or_else(|| {
            let one = property
                .get("oneOf")
                .or_else(|| property.get("items").and_then(|i| i.get("anyOf")))?;
            Some(
                one.as_array()?
                    .iter()
                    .filter_map(|o| {
                        let c = o.get("const")?.as_str()?;
                        let t = o.get("title").and_then(Value::as_str).unwrap_or(c);
                        Some(format!("{} = {}", printable(c), printable(t)))
                    })
                    .collect(),
            )
        })
        .unwrap_or_default();
    let options = if options.is_empty() {
        String::new()
    } else {
        format!(" [{}]", options.join(", "))
    };
    format!(
        "  {} ({}):{description}{options}: ",
        printable(name),
        parts.join(", ")
    )
}

/// The typed value of one answered line; `None` for an empty line (left out).
fn parse_field(property: &Value, line: &str) -> Option<Value> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    Some(match property.get("type").and_then(Value::as_str) {
        Some("integer") => line
            .parse::<i64>()
            .map_or_else(|_| Value::String(line.into()), Value::from),
        Some("number") => line
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or_else(|| Value::String(line.into()), Value::Number),
        Some("boolean") => match line.to_ascii_lowercase().as_str() {
            "y" | "yes" | "true" => Value::Bool(true),
            "n" | "no" | "false" => Value::Bool(false),
            _ => Value::String(line.into()),
        },
        Some("array") => Value::Array(
            line.split(',')
                .map(|s| Value::String(s.trim().to_owned()))
                .collect(),
        ),
        _ => Value::String(line.to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn lines_become_typed_values() {
        assert_eq!(
            parse_field(&json!({"type": "integer"}), "42\n"),
            Some(json!(42))
        );
        assert_eq!(
            parse_field(&json!({"type": "number"}), "2.5"),
            Some(json!(2.5))
        );
        assert_eq!(
            parse_field(&json!({"type": "boolean"}), "yes"),
            Some(json!(true))
        );
        assert_eq!(
            parse_field(&json!({"type": "array"}), "a, b"),
            Some(json!(["a", "b"]))
        );
        assert_eq!(parse_field(&json!({"type": "string"}), "  "), None);
        // Not a number: kept as text, so the form check names the field.
        assert_eq!(
            parse_field(&json!({"type": "integer"}), "x"),
            Some(json!("x"))
        );
    }

    #[test]
    fn choices() {
        assert_eq!(choice("y\n"), Choice::Yes);
        assert_eq!(choice("C"), Choice::Cancel);
        assert_eq!(choice(""), Choice::No);
    }

    #[test]
    fn a_prompt_shows_the_options() {
        let p = field_prompt(
            "hero",
            &json!({"type": "string", "oneOf": [{"const": "h1", "title": "Superman"}]}),
            true,
        );
        assert_eq!(p, "  hero (string, required): [h1 = Superman]: ");
    }
}

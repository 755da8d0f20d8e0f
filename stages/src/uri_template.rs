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

/// The variable names of `template`, in order of first appearance.
///
/// # Errors
/// [`TemplateError::Invalid`].
pub fn variables(template: &str) -> Result<Vec<String>, TemplateError> {
    parse(template).map(variables_of)
}

fn parse(template: &str) -> Result<&UriTemplateStr, TemplateError> {
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
        context.insert(name.clone(), value.as_str());
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
    fn lists_variables_and_rejects_bad_templates() {
        assert_eq!(
            variables("x://{a}/{+b}{?c,a}"),
            Ok(vec!["a".into(), "b".into(), "c".into()])
        );
        assert!(matches!(
            variables("x://{a"),
            Err(TemplateError::Invalid { .. })
        ));
    }
}

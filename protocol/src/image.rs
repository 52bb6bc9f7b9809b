//! The check of a `--syndeo=IMAGE` value. The plugin runs it where the user
//! typed the value (so a bad value is refused before the job is queued), and
//! the root side runs it again on whatever reached the prolog (a value set by
//! hand in the job's environment never passed the first check).

/// Longest image path accepted (Linux PATH_MAX).
pub const MAX_IMAGE_PATH: usize = 4096;

/// Returns a one-line message (starting with `syndeo:`) when `value` cannot
/// name an image: empty, overlong, with control characters, not absolute
/// (which also refuses a leading `-`), or with a `..` component.
pub fn check_image_value(value: &str) -> Result<(), String> {
    let shown: String = value.chars().take(80).flat_map(char::escape_default).collect();
    if value.is_empty() {
        return Err("syndeo: --syndeo= has an empty IMAGE; give an absolute path \
                    (--syndeo=/path/to/image) or omit `=` for the site default"
            .into());
    }
    if value.len() > MAX_IMAGE_PATH {
        return Err(format!("syndeo: --syndeo IMAGE is {} bytes long; the limit is {MAX_IMAGE_PATH}", value.len()));
    }
    if value.chars().any(char::is_control) {
        return Err(format!(
            "syndeo: --syndeo IMAGE \"{shown}\" contains a control character (newline, tab, ...); remove it"
        ));
    }
    if !value.starts_with('/') {
        return Err(format!(
            "syndeo: --syndeo IMAGE \"{shown}\" is not an absolute path; write it from / \
             (for example --syndeo=$PWD/{shown})"
        ));
    }
    if value.split('/').any(|c| c == "..") {
        return Err(format!(
            "syndeo: --syndeo IMAGE \"{shown}\" contains a `..` component; give the path without `..`"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_image_path_is_accepted() {
        assert!(check_image_value("/shared/images/ray.sif").is_ok());
        assert!(check_image_value("/a b/with space").is_ok());
    }

    #[test]
    fn relative_path_and_a_leading_dash_are_refused_with_a_fix() {
        for v in ["images/ray.sif", "-rf", "--image=/x"] {
            let e = check_image_value(v).unwrap_err();
            assert!(e.starts_with("syndeo:") && e.contains("absolute path"), "{e}");
        }
    }

    #[test]
    fn empty_value_is_refused() {
        assert!(check_image_value("").unwrap_err().contains("empty"));
    }

    #[test]
    fn control_characters_are_refused_in_a_one_line_message() {
        let e = check_image_value("/img\nrm -rf /").unwrap_err();
        assert!(e.contains("control character"), "{e}");
        assert!(!e.contains('\n'), "message must stay on one line: {e}");
    }

    #[test]
    fn dotdot_component_is_refused_but_dots_in_names_are_not() {
        assert!(check_image_value("/shared/../etc/shadow").is_err());
        assert!(check_image_value("/shared/ray..v2/img").is_ok());
    }

    #[test]
    fn overlong_value_is_refused() {
        let long = format!("/{}", "a".repeat(MAX_IMAGE_PATH));
        assert!(check_image_value(&long).unwrap_err().contains("limit"));
    }
}

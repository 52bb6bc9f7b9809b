//! Serde for a path key that may be unset: `""` in syndeo.toml (the
//! reference file writes `default_image = ""`) is `None`, and `None` is
//! written back as `""`, so the job's spec (JSON) keeps the file's form.
//! Used as `#[serde(with = "optional_path")]`.
use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub fn serialize<S: Serializer>(path: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
    match path {
        Some(p) => p.serialize(s),
        None => s.serialize_str(""),
    }
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PathBuf>, D::Error> {
    let p = PathBuf::deserialize(d)?;
    Ok(if p.as_os_str().is_empty() { None } else { Some(p) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Holder {
        #[serde(with = "super")]
        image: Option<PathBuf>,
    }

    #[test]
    fn an_empty_string_is_none_and_none_is_written_as_an_empty_string() {
        let h: Holder = toml::from_str("image = \"\"").unwrap();
        assert_eq!(h.image, None);
        assert_eq!(serde_json::to_string(&h).unwrap(), r#"{"image":""}"#);
    }

    #[test]
    fn a_path_round_trips_as_itself() {
        let h: Holder = toml::from_str("image = \"/shared/ray.sif\"").unwrap();
        assert_eq!(h.image.as_deref(), Some(std::path::Path::new("/shared/ray.sif")));
        assert_eq!(serde_json::from_str::<Holder>(&serde_json::to_string(&h).unwrap()).unwrap(), h);
    }
}

//! A bind mount into the job's containers: the site's `extra_binds`
//! ("SRC[:DST[:ro|rw]]", parsed once when the config is loaded, the message
//! naming the key) and the job's own directories (`agent/ray.rs`). The
//! runtimes turn a list of them into their arguments.
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// SRC on the host at DST in the container, read-only or not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Bind {
    pub src: PathBuf,
    pub dst: PathBuf,
    pub ro: bool,
}

impl Bind {
    /// `p` at the same path inside, writable.
    pub fn rw(p: impl Into<PathBuf>) -> Bind {
        let p = p.into();
        Bind { src: p.clone(), dst: p, ro: false }
    }

    /// "SRC[:DST[:ro|rw]]" with absolute paths.
    pub fn parse(s: &str) -> Result<Bind, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let (src, dst, mode) = match parts.as_slice() {
            [src] => (*src, *src, "rw"),
            [src, dst] => (*src, *dst, "rw"),
            [src, dst, mode] => (*src, *dst, *mode),
            _ => return Err(format!("extra_binds entry \"{s}\" is not SRC[:DST[:ro]]")),
        };
        if !src.starts_with('/') || !dst.starts_with('/') {
            return Err(format!("extra_binds entry \"{s}\" needs absolute paths"));
        }
        let ro = match mode {
            "ro" => true,
            "rw" => false,
            _ => return Err(format!("extra_binds entry \"{s}\": mode must be ro or rw")),
        };
        Ok(Bind { src: src.into(), dst: dst.into(), ro })
    }
}

impl TryFrom<String> for Bind {
    type Error = String;

    fn try_from(s: String) -> Result<Bind, String> {
        Bind::parse(&s)
    }
}

/// "SRC:DST:ro" or "SRC:DST:rw", which `parse` reads back (the job's spec
/// carries `extra_binds` in this form).
impl From<Bind> for String {
    fn from(b: Bind) -> String {
        format!("{}:{}:{}", b.src.display(), b.dst.display(), if b.ro { "ro" } else { "rw" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_form_parses_dst_defaulting_to_src_and_mode_to_rw() {
        assert_eq!(Bind::parse("/data").unwrap(), Bind::rw("/data"));
        assert_eq!(Bind::parse("/data:/d").unwrap(), Bind { src: "/data".into(), dst: "/d".into(), ro: false });
        let b = Bind::parse("/scratch/x:/x:ro").unwrap();
        assert_eq!((b.src, b.dst, b.ro), ("/scratch/x".into(), "/x".into(), true));
        assert!(!Bind::parse("/a:/b:rw").unwrap().ro);
    }

    #[test]
    fn relative_paths_unknown_modes_and_extra_fields_are_refused_naming_the_key_and_entry() {
        for (bad, why) in [
            ("data", "needs absolute paths"),
            ("/a:b", "needs absolute paths"),
            ("/a:/b:maybe", "mode must be ro or rw"),
            ("/a:/b:ro:x", "is not SRC[:DST[:ro]]"),
        ] {
            let e = Bind::parse(bad).unwrap_err();
            assert!(e.starts_with(&format!("extra_binds entry \"{bad}\"")) && e.contains(why), "{e}");
        }
    }

    #[test]
    fn it_serializes_as_text_that_parses_back_to_the_same_bind() {
        for b in [Bind::rw("/data"), Bind { src: "/scratch/x".into(), dst: "/x".into(), ro: true }] {
            let json = serde_json::to_string(&b).unwrap();
            assert!(json.starts_with('"'), "{json}");
            assert_eq!(serde_json::from_str::<Bind>(&json).unwrap(), b);
        }
    }
}

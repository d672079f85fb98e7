//! A stored object's JSON text, deflated against its resource's dictionary.
//!
//! The objects of one resource repeat each other: the same keys in the same order, the
//! same labels, conditions and managers, values that differ in a few characters. Deflated
//! alone, a 1.8 KB Workspace shrinks to about 680 bytes; deflated with another Workspace
//! as preset dictionary, to about 150 (a name-claim ConfigMap: 660 to 150). The store keeps
//! every object this way, so `terrace dev` holds a large cluster in a fraction of the
//! memory (issue 43: the simulator held 2.8 KiB of text per workspace, more than the
//! operator's or the API server's copy of it). The dictionary of a resource is the text of
//! the first object the store holds of it ([`Dictionary::first`]); it lives as long as any
//! object packed against it.
//!
//! Reading the text back inflates it (a few microseconds for a workspace): gets, lists,
//! watch events and the log read it; selectors, owners and the API-version check read
//! what [`crate::store::Obj`] keeps beside it.

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::Arc;

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

/// Deflate's window: a dictionary longer than this is cut to its last 32 KiB.
const WINDOW: usize = 32 * 1024;
/// Texts shorter than this are kept as they are (the stream's own overhead would eat the
/// gain).
const MIN_PACKED: usize = 128;
/// Texts longer than this are kept as they are too: the gain is in the many small
/// objects, and deflating a large one (a state or log blob stored as a Secret, mostly
/// base64 that barely shrinks) on every write would hold the store's lock for it.
const MAX_PACKED: usize = 16 * 1024;
/// Names a resource shares at most: past them (objects with ever new label keys), a
/// name is an allocation of its own again rather than a table that only grows.
const MAX_SHARED: usize = 256;

/// A resource's preset dictionary.
#[derive(Clone, Debug)]
pub struct Dictionary(Arc<[u8]>);

impl Dictionary {
    /// The dictionary made of `text` (the first object stored of a resource).
    pub fn first(text: &str) -> Dictionary {
        let bytes = text.as_bytes();
        Dictionary(Arc::from(&bytes[bytes.len().saturating_sub(WINDOW)..]))
    }
}

/// What a resource's objects are packed with: its dictionary (the first object's text)
/// and one shared copy of each `apiVersion` and label key its objects carry.
#[derive(Debug, Default)]
pub struct Packer {
    dictionary: Option<Dictionary>,
    names: std::collections::HashSet<Arc<str>>,
}

impl Packer {
    /// `text` packed against the resource's dictionary (`text` itself if it is the first).
    pub fn text(&mut self, text: String) -> Text {
        let dictionary = self
            .dictionary
            .get_or_insert_with(|| Dictionary::first(&text));
        Text::pack(text, dictionary)
    }

    /// The shared copy of `name` (an `apiVersion`, a label key).
    pub fn shared(&mut self, name: &str) -> Arc<str> {
        if let Some(v) = self.names.get(name) {
            return v.clone();
        }
        let v: Arc<str> = Arc::from(name);
        if self.names.len() < MAX_SHARED {
            self.names.insert(v.clone());
        }
        v
    }
}

/// JSON text, deflated when that makes it smaller.
#[derive(Debug)]
pub enum Text {
    Plain(Box<str>),
    Deflated {
        data: Box<[u8]>,
        len: u32,
        dictionary: Dictionary,
    },
}

thread_local! {
    /// A deflater and an inflater per thread, reset between uses (setting one up
    /// allocates and clears its window and tables: more than packing a text costs).
    static CODERS: RefCell<(Compress, Decompress)> = RefCell::new((
        Compress::new(Compression::default(), false),
        Decompress::new(false),
    ));
}

impl Text {
    /// `text`, deflated against `dictionary` when that is smaller.
    pub fn pack(text: String, dictionary: &Dictionary) -> Text {
        let packed = (MIN_PACKED..=MAX_PACKED)
            .contains(&text.len())
            .then(|| CODERS.with(|c| deflate(&mut c.borrow_mut().0, text.as_bytes(), dictionary)))
            .flatten()
            .filter(|d| d.len() < text.len());
        match packed {
            Some(data) => Text::Deflated {
                data: data.into_boxed_slice(),
                len: u32::try_from(text.len()).unwrap_or(u32::MAX),
                dictionary: dictionary.clone(),
            },
            None => Text::Plain(text.into_boxed_str()),
        }
    }

    /// The text.
    pub fn get(&self) -> Cow<'_, str> {
        match self {
            Text::Plain(s) => Cow::Borrowed(s),
            Text::Deflated {
                data,
                len,
                dictionary,
            } => Cow::Owned(
                CODERS
                    .with(|c| inflate(&mut c.borrow_mut().1, data, *len as usize, dictionary))
                    .unwrap_or_else(|| {
                        // Unreachable short of memory corruption: the store packed it.
                        tracing::error!("a stored object's text does not inflate");
                        "null".to_owned()
                    }),
            ),
        }
    }
}

fn deflate(c: &mut Compress, text: &[u8], dictionary: &Dictionary) -> Option<Vec<u8>> {
    c.reset();
    c.set_dictionary(&dictionary.0).ok()?;
    let mut out = Vec::with_capacity(text.len() / 3 + 64);
    loop {
        let done = usize::try_from(c.total_in()).ok()?;
        match c
            .compress_vec(&text[done..], &mut out, FlushCompress::Finish)
            .ok()?
        {
            Status::StreamEnd => return Some(out),
            Status::Ok | Status::BufError => {
                if out.len() >= text.len() {
                    return None;
                }
                out.reserve(out.capacity().max(64));
            }
        }
    }
}

fn inflate(d: &mut Decompress, data: &[u8], len: usize, dictionary: &Dictionary) -> Option<String> {
    d.reset(false);
    d.set_dictionary(&dictionary.0).ok()?;
    let mut out = Vec::with_capacity(len);
    match d
        .decompress_vec(data, &mut out, FlushDecompress::Finish)
        .ok()?
    {
        Status::StreamEnd if out.len() == len => String::from_utf8(out).ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace(name: &str) -> String {
        serde_json::json!({
            "apiVersion": "terrace.dev/v1alpha1",
            "kind": "Workspace",
            "metadata": {"name": name, "namespace": "acme", "labels": {"terrace.dev/id": format!("ws-{name}")}},
            "spec": {"name": name, "autoApply": false, "description": "a workspace of the acme organization"},
        })
        .to_string()
    }

    #[test]
    fn texts_come_back_as_they_were_packed_and_smaller() {
        let dict = Dictionary::first(&workspace("first"));
        for name in ["first", "second", "a-much-longer-name-than-the-first-one"] {
            let text = workspace(name);
            let packed = Text::pack(text.clone(), &dict);
            let Text::Deflated { data, .. } = &packed else {
                panic!("{name} was not deflated");
            };
            assert!(
                data.len() * 3 < text.len(),
                "{} of {}",
                data.len(),
                text.len()
            );
            assert_eq!(packed.get(), text);
        }
    }

    #[test]
    fn short_long_or_incompressible_texts_stay_plain() {
        let dict = Dictionary::first(&workspace("first"));
        let short = Text::pack("{\"a\":1}".to_owned(), &dict);
        assert!(matches!(short, Text::Plain(_)));
        assert_eq!(short.get(), "{\"a\":1}");
        let long = format!("{{\"a\":\"{}\"}}", "x".repeat(MAX_PACKED));
        let packed = Text::pack(long.clone(), &dict);
        assert!(matches!(packed, Text::Plain(_)));
        assert_eq!(packed.get(), long);
        // Random bytes (as base64 would not repeat anything) do not shrink.
        let noise: String = (0..600u32)
            .map(|i| char::from(b'!' + (i.wrapping_mul(2_654_435_761) >> 26) as u8))
            .collect();
        let text = Text::pack(noise.clone(), &dict);
        assert_eq!(text.get(), noise);
    }

    #[test]
    fn names_are_shared_up_to_a_bound() {
        let mut packer = Packer::default();
        let a = packer.shared("terrace.dev/id");
        assert!(Arc::ptr_eq(&a, &packer.shared("terrace.dev/id")));
        for i in 0..MAX_SHARED * 2 {
            assert_eq!(&*packer.shared(&format!("key-{i}")), format!("key-{i}"));
        }
        assert_eq!(packer.names.len(), MAX_SHARED);
    }

    #[test]
    fn texts_packed_on_other_threads_unpack_here() {
        let dict = Dictionary::first(&workspace("first"));
        let packed = std::thread::scope(|s| {
            s.spawn(|| Text::pack(workspace("other"), &dict))
                .join()
                .expect("thread")
        });
        assert_eq!(packed.get(), workspace("other"));
    }
}

//! Paged lists, as the Kubernetes API pages them: `limit` bounds a page,
//! and a page that is not the last carries a `continue` token (and the
//! count of the objects after it, `remainingItemCount`) that asks for the
//! next one. Every page also stops before [`MAX_PAGE_BYTES`], so that it
//! fits in the 4 MiB that grpcurl and tonic clients accept by default;
//! clients must go by the token, not by the count, as Kubernetes clients
//! do.
//!
//! A token names the list it belongs to and the key of the last object
//! sent: the next page starts after that key in the objects as they are
//! then (the Kubernetes API serves pages from one snapshot until its token
//! expires, and from the current state after; berth keeps no snapshots).

use prost::Message;

use super::ApiError;

/// The largest `limit` accepted.
pub const MAX_LIMIT: i64 = 10_000;

/// A page stops before its objects' encoding passes this many bytes (a
/// single larger object still makes a page of its own).
pub const MAX_PAGE_BYTES: usize = 4 * 1024 * 1024 - 64 * 1024;

/// One page.
#[derive(Debug)]
pub struct Page<T> {
    /// The page's items.
    pub items: Vec<T>,
    /// The token for the next page; empty on the last.
    pub next: String,
    /// Objects after this page (0 on the last).
    pub remaining: i64,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The token for the page after `last` in the list `scope`.
fn token(scope: &str, last: &str) -> String {
    hex(format!("v1\0{scope}\0{last}").as_bytes())
}

/// The key after which the page of `token` starts; the token must belong
/// to `scope`.
fn start_after(scope: &str, token: &str) -> Result<Option<String>, ApiError> {
    if token.is_empty() {
        return Ok(None);
    }
    let invalid =
        |why: &str| ApiError::InvalidArgument(format!("continue: Invalid value: {token:?}: {why}"));
    let text = unhex(token)
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| invalid("not a continue token of this server"))?;
    let mut parts = text.splitn(3, '\0');
    let (Some("v1"), Some(s), Some(last)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(invalid("not a continue token of this server"));
    };
    if s != scope {
        return Err(invalid(
            "the token belongs to another list: send the same kind and namespace as for the first page",
        ));
    }
    Ok(Some(last.to_string()))
}

/// The page of `sorted` (ordered by `key`) that `token` asks for, at most
/// `limit` items (0: no limit), each converted by `convert`.
pub fn page<S, T: Message>(
    sorted: &[S],
    key: impl Fn(&S) -> String,
    convert: impl Fn(&S) -> T,
    limit: i64,
    continue_token: &str,
    scope: &str,
) -> Result<Page<T>, ApiError> {
    if !(0..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::InvalidArgument(format!(
            "limit: Invalid value: {limit}: must be between 0 and {MAX_LIMIT}"
        )));
    }
    let start = match start_after(scope, continue_token)? {
        Some(last) => sorted.partition_point(|s| key(s).as_str() <= last.as_str()),
        None => 0,
    };
    let limit = if limit == 0 {
        usize::MAX
    } else {
        limit as usize
    };
    let mut items = Vec::new();
    let mut bytes = 0usize;
    let mut end = start;
    for s in &sorted[start..] {
        if items.len() >= limit {
            break;
        }
        let item = convert(s);
        // Each item costs its length, a tag and a length prefix.
        let len = item.encoded_len() + 8;
        if !items.is_empty() && bytes + len > MAX_PAGE_BYTES {
            break;
        }
        bytes += len;
        items.push(item);
        end += 1;
    }
    let remaining = sorted.len() - end;
    let next = if remaining > 0 && end > start {
        token(scope, &key(&sorted[end - 1]))
    } else {
        String::new()
    };
    let remaining = if next.is_empty() { 0 } else { remaining as i64 };
    Ok(Page {
        items,
        next,
        remaining,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(p: &Page<String>) -> Vec<&str> {
        p.items.iter().map(String::as_str).collect()
    }

    #[test]
    fn pages_follow_tokens_to_the_end() {
        let all: Vec<String> = (0..7).map(|i| format!("n{i}")).collect();
        let get =
            |limit, token: &str| page(&all, |s| s.clone(), |s| s.clone(), limit, token, "Node/");
        let p1 = get(3, "").unwrap();
        assert_eq!(names(&p1), ["n0", "n1", "n2"]);
        assert_eq!(p1.remaining, 4);
        let p2 = get(3, &p1.next).unwrap();
        assert_eq!(names(&p2), ["n3", "n4", "n5"]);
        let p3 = get(3, &p2.next).unwrap();
        assert_eq!(names(&p3), ["n6"]);
        assert!(p3.next.is_empty());
        assert_eq!(p3.remaining, 0);
        let whole = get(0, "").unwrap();
        assert_eq!(whole.items.len(), 7);
        assert!(whole.next.is_empty());
    }

    #[test]
    fn a_page_stops_at_its_byte_budget() {
        let big: Vec<String> = (0..10)
            .map(|i| format!("{i}{}", "x".repeat(1 << 20)))
            .collect();
        let p = page(&big, |s| s[..1].to_string(), |s| s.clone(), 0, "", "Pod/").unwrap();
        assert_eq!(p.items.len(), 3, "3 MiB fit in a page, 4 do not");
        assert_eq!(p.remaining, 7);
        let p2 = page(
            &big,
            |s| s[..1].to_string(),
            |s| s.clone(),
            0,
            &p.next,
            "Pod/",
        )
        .unwrap();
        assert_eq!(p2.items[0].as_bytes()[0], b'3');
    }

    #[test]
    fn bad_tokens_and_limits_name_the_field() {
        let all = vec!["a".to_string()];
        let get = |limit, token: &str, scope| {
            page(&all, |s| s.clone(), |s| s.clone(), limit, token, scope)
        };
        let e = get(0, "zz", "Pod/").unwrap_err().to_string();
        assert!(
            e.starts_with("continue: Invalid value: \"zz\": not a continue token"),
            "{e}"
        );
        let t = token("Pod/shop", "a");
        let e = get(0, &t, "Pod/").unwrap_err().to_string();
        assert!(e.contains("belongs to another list"), "{e}");
        let e = get(-1, "", "Pod/").unwrap_err().to_string();
        assert_eq!(e, "limit: Invalid value: -1: must be between 0 and 10000");
    }
}

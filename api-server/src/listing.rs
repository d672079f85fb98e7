//! One way every organization list reads its request: the page, the filters the endpoint
//! takes (any other `filter[...]` is 400), what `include` asks for (each one the endpoint
//! offers), and the objects of the kind the caller may list there ([`Listing::read`]).
//! The handler then narrows and orders [`Listing::items`] by its own rules and answers
//! with [`Listing::answer`]: the page, TFE's pagination and links, and `included`
//! ([`Included`]). A kind whose document needs nothing but the index and its
//! organization implements [`Shown`] once, and its list and show answer from that
//! ([`Listing::answer_shown`], [`show`]).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use serde_json::Value;
use terrace_crds::Organization;
use terrace_crds::rules::Page;

use crate::AppState;
use crate::access::{Found, Guarded, VisibleOrg};
use crate::error::ApiError;
use crate::index::Inner;
use crate::query::QueryParams;
use crate::render::{Doc, Included};

/// A kind the API shows the same way in its lists and by ID: its document and what
/// `include` may add to it.
pub trait Shown: Guarded {
    /// What `include` may name.
    const INCLUDES: &'static [&'static str] = &[];

    /// The JSON:API `data` of this object of organization `org`.
    fn data(&self, idx: &Inner, org: &Organization) -> Value;

    /// Adds what `inc` asks of this object.
    fn include(&self, _idx: &Inner, _org: &Organization, _inc: &mut Included) {}
}

/// `GET /api/v2/<path>/{id}` of a [`Shown`] kind: the object, with what `include` asks.
pub async fn show<K: Shown>(
    State(state): State<AppState>,
    f: Found<K>,
    q: QueryParams,
) -> Result<Doc, ApiError> {
    let mut inc = Included::asked(&q, K::INCLUDES)?;
    let idx = state.index.read();
    f.at.obj.include(&idx, &f.at.org, &mut inc);
    Ok(inc.show(StatusCode::OK, f.at.obj.data(&idx, &f.at.org)))
}

/// A list request of the organization's objects of kind `K`, read.
pub struct Listing<K> {
    /// The page asked for.
    pub page: Page,
    /// What `include` asks for, gathered as the page is rendered.
    pub included: Included,
    /// The objects the caller may list (none without the right), to narrow and order.
    pub items: Vec<Arc<K>>,
    /// The collection's path, the base of the answer's links.
    base: String,
}

impl<K: Guarded> Listing<K> {
    /// The request `q` to `/api/v2/organizations/:org/{path}`, which takes `filters` and
    /// may include `offered`.
    pub async fn read(
        state: &AppState,
        o: &VisibleOrg,
        q: &QueryParams,
        path: &str,
        filters: &[&str],
        offered: &[&str],
    ) -> Result<Self, ApiError> {
        let page = q.page()?;
        q.supported_filters(filters)?;
        let included = Included::asked(q, offered)?;
        let items = state.listable::<K>(&o.caller, &o.org).await?;
        Ok(Listing {
            page,
            included,
            items,
            base: format!("/api/v2/organizations/{}/{path}", o.org.tfe_name()),
        })
    }

    /// Keeps the items whose name contains the value of `key`, in any case, when the
    /// request gives one ([`QueryParams::retain_named`]).
    pub fn search(&mut self, q: &QueryParams, key: &str, name: impl Fn(&K) -> &str) {
        q.retain_named(key, &mut self.items, |k| name(k));
    }

    /// 200 with the page of the items, each rendered by `render` (which adds to
    /// `included` what the item includes).
    pub fn answer(self, render: impl FnMut(&Arc<K>, &mut Included) -> Value) -> Doc {
        self.included
            .list(&self.base, self.page, &self.items, render)
    }
}

impl<K: Shown> Listing<K> {
    /// [`Self::answer`] with each item's [`Shown`] document and includes.
    pub fn answer_shown(self, idx: &Inner, org: &Organization) -> Doc {
        self.answer(|k, inc| {
            k.include(idx, org, inc);
            k.data(idx, org)
        })
    }
}

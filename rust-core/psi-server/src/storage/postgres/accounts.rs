//! Issued tokens on PostgreSQL: [`AccountStore`] with the semantics of the SQLite store.
//! Budgets are not saved here: with PostgreSQL every instance charges them in the
//! database directly ([`super::budgets`]), so [`AccountStore::budgets`] is empty and
//! [`AccountStore::save_budgets`] does nothing. Blocking, like the registry store.

use super::super::contract::{AccountStore, NewToken, Revoked, SavedBudget, TokenInfo};
use super::super::error::StoreError;
use super::super::tokens::TokenIssue;
use super::budgets::{BudgetError, SharedBudgets};
use super::schema;
use super::settings::PgSettings;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The token columns, `created` as `YYYY-MM-DDTHH:MM:SSZ` (UTC).
const TOKEN_COLUMNS: &str = "id, name, \
     to_char(to_timestamp(created) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), \
     revoked, items_per_hour";

/// The PostgreSQL account store (tokens).
pub struct PgAccounts {
    client: Mutex<postgres::Client>,
}

impl PgAccounts {
    /// Connects and creates the tables that are missing. Needs no at-rest key (tokens are
    /// stored as digests). Blocking.
    pub fn open(settings: &PgSettings) -> Result<PgAccounts, StoreError> {
        let mut client = settings.connect_blocking()?;
        schema::ensure(&mut client)?;
        Ok(PgAccounts {
            client: Mutex::new(client),
        })
    }

    fn conn(&self) -> MutexGuard<'_, postgres::Client> {
        self.client.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Token lookups on the request path: async, on the pool the shared budgets are charged
/// through (never a blocking connection behind a lock; docs/adr/0040-shared-store.md).
#[derive(Clone)]
pub struct PgTokenLookup {
    pool: SharedBudgets,
}

impl PgTokenLookup {
    /// Lookups on `pool`'s connections.
    pub fn new(pool: SharedBudgets) -> PgTokenLookup {
        PgTokenLookup { pool }
    }

    /// The token whose digest is `digest`, revoked or not.
    pub async fn token_by_digest(
        &self,
        digest: &[u8; 32],
    ) -> Result<Option<TokenInfo>, BudgetError> {
        let client = self.pool.client().await?;
        let row = client
            .query_opt(
                &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE digest = $1"),
                &[&digest.as_slice()],
            )
            .await?;
        Ok(row.as_ref().map(token_row))
    }

    /// True once any token was issued (revoked ones count).
    pub async fn has_tokens(&self) -> Result<bool, BudgetError> {
        let client = self.pool.client().await?;
        Ok(client
            .query_one("SELECT EXISTS (SELECT 1 FROM tokens)", &[])
            .await?
            .get(0))
    }
}

fn token_row(r: &postgres::Row) -> TokenInfo {
    TokenInfo {
        id: r.get(0),
        name: r.get(1),
        created: r.get(2),
        revoked: r.get(3),
        items_per_hour: r.get::<_, Option<i64>>(4).map(|v| v.max(0) as u64),
    }
}

impl AccountStore for PgAccounts {
    fn add_token(
        &mut self,
        name: Option<&str>,
        items_per_hour: Option<u64>,
    ) -> Result<NewToken, StoreError> {
        let TokenIssue {
            token,
            digest,
            items_per_hour: budget,
        } = TokenIssue::new(name, items_per_hour)?;
        let row = self.conn().query_one(
            &format!(
                "INSERT INTO tokens (digest, name, created, items_per_hour)
                 VALUES ($1, $2, extract(epoch FROM now())::BIGINT, $3)
                 RETURNING {TOKEN_COLUMNS}"
            ),
            &[&digest.as_slice(), &name, &budget],
        )?;
        Ok(NewToken {
            info: token_row(&row),
            token,
        })
    }

    fn revoke_token(&mut self, id: i64) -> Result<Revoked, StoreError> {
        let mut conn = self.conn();
        let now = conn.execute(
            "UPDATE tokens SET revoked = TRUE WHERE id = $1 AND NOT revoked",
            &[&id],
        )?;
        if now > 0 {
            return Ok(Revoked::Now);
        }
        let exists: bool = conn
            .query_one("SELECT EXISTS (SELECT 1 FROM tokens WHERE id = $1)", &[&id])?
            .get(0);
        Ok(if exists {
            Revoked::Already
        } else {
            Revoked::NoSuchToken
        })
    }

    fn tokens(&self) -> Result<Vec<TokenInfo>, StoreError> {
        let rows = self.conn().query(
            &format!("SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY id"),
            &[],
        )?;
        Ok(rows.iter().map(token_row).collect())
    }

    fn token_by_digest(&self, digest: &[u8; 32]) -> Result<Option<TokenInfo>, StoreError> {
        let row = self.conn().query_opt(
            &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE digest = $1"),
            &[&digest.as_slice()],
        )?;
        Ok(row.as_ref().map(token_row))
    }

    fn has_tokens(&self) -> Result<bool, StoreError> {
        Ok(self
            .conn()
            .query_one("SELECT EXISTS (SELECT 1 FROM tokens)", &[])?
            .get(0))
    }

    /// Empty: budgets are charged in the database directly ([`super::budgets`]).
    fn budgets(&self) -> Result<Vec<SavedBudget>, StoreError> {
        Ok(Vec::new())
    }

    /// Nothing to save: budgets are charged in the database directly.
    fn save_budgets(&mut self, _rows: &[SavedBudget], _now_ms: i64) -> Result<(), StoreError> {
        Ok(())
    }
}

//! Issued tokens and the rate limiter's saved budgets on SQLite ([`AccountStore`]).

use super::super::contract::{AccountStore, NewToken, Revoked, SavedBudget, TokenInfo};
use super::super::error::StoreError;
use super::super::tokens::TokenIssue;
use super::Store;
use rusqlite::{OptionalExtension, params};

const TOKEN_COLUMNS: &str =
    "id, name, strftime('%Y-%m-%dT%H:%M:%SZ', created, 'unixepoch'), revoked, items_per_hour";

fn token_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<TokenInfo> {
    Ok(TokenInfo {
        id: r.get(0)?,
        name: r.get(1)?,
        created: r.get(2)?,
        revoked: r.get::<_, i64>(3)? != 0,
        items_per_hour: r.get::<_, Option<i64>>(4)?.map(|v| v.max(0) as u64),
    })
}

impl Store {
    /// Issues a new random bearer token (`psi_` and 64 hex digits) and stores its digest.
    /// `items_per_hour`: its own budget (`None`: the server's default; 0: unlimited).
    pub fn add_token(
        &mut self,
        name: Option<&str>,
        items_per_hour: Option<u64>,
    ) -> Result<NewToken, StoreError> {
        let TokenIssue {
            token,
            digest,
            items_per_hour: budget,
        } = TokenIssue::new(name, items_per_hour)?;
        self.conn.execute(
            "INSERT INTO tokens (digest, name, created, items_per_hour)
             VALUES (?1, ?2, CAST(strftime('%s', 'now') AS INTEGER), ?3)",
            params![digest.as_slice(), name, budget],
        )?;
        let id = self.conn.last_insert_rowid();
        let info = self.conn.query_row(
            &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE id = ?1"),
            params![id],
            token_row,
        )?;
        Ok(NewToken { info, token })
    }

    /// Revokes token `id` (its row stays, marked revoked).
    pub fn revoke_token(&mut self, id: i64) -> Result<Revoked, StoreError> {
        let revoked: Option<i64> = self
            .conn
            .query_row(
                "SELECT revoked FROM tokens WHERE id = ?1",
                params![id],
                |r| r.get(0),
            )
            .optional()?;
        Ok(match revoked {
            None => Revoked::NoSuchToken,
            Some(r) if r != 0 => Revoked::Already,
            Some(_) => {
                self.conn
                    .execute("UPDATE tokens SET revoked = 1 WHERE id = ?1", params![id])?;
                Revoked::Now
            }
        })
    }

    /// Every issued token, revoked ones included, by id.
    pub fn tokens(&self) -> Result<Vec<TokenInfo>, StoreError> {
        let mut q = self
            .conn
            .prepare(&format!("SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY id"))?;
        let rows = q.query_map([], token_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The token whose digest is `digest` (see
    /// [`token_digest`](crate::storage::token_digest)), revoked or not.
    pub fn token_by_digest(&self, digest: &[u8; 32]) -> Result<Option<TokenInfo>, StoreError> {
        Ok(self
            .conn
            .query_row(
                &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE digest = ?1"),
                params![digest.as_slice()],
                token_row,
            )
            .optional()?)
    }

    /// True once any token was issued (revoked ones count: revoking the last token must
    /// not open the server to everyone).
    pub fn has_tokens(&self) -> Result<bool, StoreError> {
        Ok(self
            .conn
            .query_row("SELECT EXISTS (SELECT 1 FROM tokens)", [], |r| r.get(0))?)
    }

    /// The saved rate-limit budgets.
    pub fn budgets(&self) -> Result<Vec<SavedBudget>, StoreError> {
        let mut q = self
            .conn
            .prepare("SELECT client, remaining, per_hour, updated_ms FROM budgets")?;
        let rows = q.query_map([], |r| {
            Ok(SavedBudget {
                client: r.get(0)?,
                remaining: r.get(1)?,
                per_hour: r.get::<_, i64>(2)?.max(0) as u64,
                updated_ms: r.get(3)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Saves `rows` (replacing older rows of the same clients) and deletes the rows whose
    /// budget is full again at `now_ms` (refilled at `per_hour` an hour since
    /// `updated_ms`; every row older than an hour is), in one transaction.
    pub fn save_budgets(&mut self, rows: &[SavedBudget], now_ms: i64) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        {
            let mut up = tx.prepare(
                "INSERT OR REPLACE INTO budgets (client, remaining, per_hour, updated_ms)
                 VALUES (?1, ?2, ?3, ?4)",
            )?;
            for b in rows {
                let per_hour = i64::try_from(b.per_hour).unwrap_or(i64::MAX);
                up.execute(params![b.client, b.remaining, per_hour, b.updated_ms])?;
            }
        }
        tx.execute(
            "DELETE FROM budgets WHERE per_hour <= 0 OR updated_ms < ?1 - 3600000
                 OR remaining + (?1 - updated_ms) / 3600000.0 * per_hour >= per_hour",
            params![now_ms],
        )?;
        tx.commit()?;
        Ok(())
    }
}

impl AccountStore for Store {
    fn add_token(
        &mut self,
        name: Option<&str>,
        items_per_hour: Option<u64>,
    ) -> Result<NewToken, StoreError> {
        Store::add_token(self, name, items_per_hour)
    }
    fn revoke_token(&mut self, id: i64) -> Result<Revoked, StoreError> {
        Store::revoke_token(self, id)
    }
    fn tokens(&self) -> Result<Vec<TokenInfo>, StoreError> {
        Store::tokens(self)
    }
    fn token_by_digest(&self, digest: &[u8; 32]) -> Result<Option<TokenInfo>, StoreError> {
        Store::token_by_digest(self, digest)
    }
    fn has_tokens(&self) -> Result<bool, StoreError> {
        Store::has_tokens(self)
    }
    fn budgets(&self) -> Result<Vec<SavedBudget>, StoreError> {
        Store::budgets(self)
    }
    fn save_budgets(&mut self, rows: &[SavedBudget], now_ms: i64) -> Result<(), StoreError> {
        Store::save_budgets(self, rows, now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::tokens::token_digest;
    use std::path::Path;

    #[test]
    fn tokens_are_stored_as_digests_and_revoked_in_place() {
        let mut s = Store::open(Path::new(":memory:")).unwrap();
        assert!(!s.has_tokens().unwrap());
        let a = s.add_token(Some("alice"), Some(100)).unwrap();
        let b = s.add_token(None, None).unwrap();
        assert!(a.token.starts_with("psi_") && a.token.len() == 68);
        assert_ne!(a.token.as_str(), b.token.as_str());
        assert_eq!((a.info.id, b.info.id), (1, 2));
        let found = s.token_by_digest(&token_digest(&a.token)).unwrap().unwrap();
        assert_eq!(found, a.info);
        assert_eq!(found.items_per_hour, Some(100));
        assert!(
            s.token_by_digest(&token_digest("psi_nope"))
                .unwrap()
                .is_none()
        );
        // Only the digest is stored.
        let raw: Vec<u8> = s
            .conn
            .query_row("SELECT digest FROM tokens WHERE id = 1", [], |r| r.get(0))
            .unwrap();
        assert_eq!(raw, token_digest(&a.token));
        assert_eq!(s.revoke_token(1).unwrap(), Revoked::Now);
        assert_eq!(s.revoke_token(1).unwrap(), Revoked::Already);
        assert_eq!(s.revoke_token(9).unwrap(), Revoked::NoSuchToken);
        assert!(
            s.token_by_digest(&token_digest(&a.token))
                .unwrap()
                .unwrap()
                .revoked
        );
        assert!(s.has_tokens().unwrap());
        assert_eq!(s.tokens().unwrap().len(), 2);
        assert!(matches!(
            s.add_token(Some("a\nb"), None),
            Err(StoreError::InvalidInput(_))
        ));
        assert!(matches!(
            s.add_token(None, Some(u64::MAX)),
            Err(StoreError::InvalidInput(_))
        ));
    }

    #[test]
    fn budgets_are_saved_replaced_and_forgotten() {
        let mut s = Store::open(Path::new(":memory:")).unwrap();
        let row = |c: &str, remaining: f64, t: i64| SavedBudget {
            client: c.into(),
            remaining,
            per_hour: 10,
            updated_ms: t,
        };
        // 10 an hour: one item comes back every 360 s.
        s.save_budgets(&[row("a", 1.0, 0), row("b", 9.0, 0)], 0)
            .unwrap();
        let mut got = s.budgets().unwrap();
        got.sort_by(|x, y| x.client.cmp(&y.client));
        assert_eq!(got, vec![row("a", 1.0, 0), row("b", 9.0, 0)]);
        // b is full again after 360 s and forgotten; a is replaced and kept.
        s.save_budgets(&[row("a", 0.5, 1000)], 360_000).unwrap();
        assert_eq!(s.budgets().unwrap(), vec![row("a", 0.5, 1000)]);
        s.save_budgets(&[], 3_000_000).unwrap();
        assert_eq!(s.budgets().unwrap(), vec![row("a", 0.5, 1000)]);
        // An hour after its charge every budget is full.
        s.save_budgets(&[], 3_601_000).unwrap();
        assert!(s.budgets().unwrap().is_empty());
    }
}

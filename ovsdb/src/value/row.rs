//! A row: its columns sorted by name, in a boxed slice of exactly their number.
//!
//! A monitor's cache holds tens of thousands of rows of the same few columns: as a B-tree, each
//! row cost a node of eleven slots and a copy of every column's name. Names here are shared
//! `Arc<str>`s (rows decoded with a schema share the schema's), and a row is one allocation.

use std::fmt;
use std::iter::FusedIterator;
use std::sync::Arc;

use super::Value;

/// A row: column name to value, in name order.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Row(Box<[(Arc<str>, Value)]>);

impl Row {
    pub fn new() -> Row {
        Row::default()
    }

    /// `columns` in ascending name order without repeats (checked in debug builds).
    pub(crate) fn from_sorted(columns: Vec<(Arc<str>, Value)>) -> Row {
        debug_assert!(columns.windows(2).all(|w| w[0].0 < w[1].0));
        Row(columns.into_boxed_slice())
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn find(&self, column: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(c, _)| (**c).cmp(column))
    }

    pub fn get(&self, column: &str) -> Option<&Value> {
        self.find(column).ok().map(|i| &self.0[i].1)
    }

    pub fn get_mut(&mut self, column: &str) -> Option<&mut Value> {
        self.find(column).ok().map(|i| &mut self.0[i].1)
    }

    pub fn contains_key(&self, column: &str) -> bool {
        self.find(column).is_ok()
    }

    /// Sets `column` to `value`; the value it replaced, if any.
    pub fn insert(&mut self, column: impl Into<Arc<str>>, value: Value) -> Option<Value> {
        let column = column.into();
        match self.find(&column) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                let mut v = std::mem::take(&mut self.0).into_vec();
                v.reserve_exact(1);
                v.insert(i, (column, value));
                self.0 = v.into_boxed_slice();
                None
            }
        }
    }

    /// Removes `column`; its value, if it was there.
    pub fn remove(&mut self, column: &str) -> Option<Value> {
        let i = self.find(column).ok()?;
        let mut v = std::mem::take(&mut self.0).into_vec();
        let (_, value) = v.remove(i);
        self.0 = v.into_boxed_slice();
        Some(value)
    }

    /// `(column, value)` pairs in column order.
    pub fn iter(&self) -> ColumnIter<'_> {
        ColumnIter(self.0.iter())
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &str> + ExactSizeIterator + Clone {
        self.0.iter().map(|(c, _)| &**c)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Value> + ExactSizeIterator + Clone {
        self.0.iter().map(|(_, v)| v)
    }
}

/// Iterator over a [`Row`]'s columns and values, as references.
#[derive(Clone, Debug)]
pub struct ColumnIter<'a>(std::slice::Iter<'a, (Arc<str>, Value)>);

impl<'a> Iterator for ColumnIter<'a> {
    type Item = (&'a str, &'a Value);
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(c, v)| (&**c, v))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for ColumnIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(|(c, v)| (&**c, v))
    }
}

impl ExactSizeIterator for ColumnIter<'_> {}
impl FusedIterator for ColumnIter<'_> {}

/// Columns in name order; of a column given twice the last value stays, as with repeated
/// inserts.
impl<K: Into<Arc<str>>> FromIterator<(K, Value)> for Row {
    fn from_iter<I: IntoIterator<Item = (K, Value)>>(iter: I) -> Row {
        let mut v: Vec<(Arc<str>, Value)> = iter.into_iter().map(|(k, v)| (k.into(), v)).collect();
        // Stable: values of one column stay in arrival order.
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                std::mem::swap(later, kept);
            }
            same
        });
        Row::from_sorted(v)
    }
}

impl<K: Into<Arc<str>>, const N: usize> From<[(K, Value); N]> for Row {
    fn from(columns: [(K, Value); N]) -> Row {
        columns.into_iter().collect()
    }
}

impl IntoIterator for Row {
    type Item = (Arc<str>, Value);
    type IntoIter = std::vec::IntoIter<(Arc<str>, Value)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_vec().into_iter()
    }
}

impl<'a> IntoIterator for &'a Row {
    type Item = (&'a str, &'a Value);
    type IntoIter = ColumnIter<'a>;
    fn into_iter(self) -> ColumnIter<'a> {
        self.iter()
    }
}

/// `row["column"]`, which panics if the row has no such column (as a map's index does).
impl std::ops::Index<&str> for Row {
    type Output = Value;
    fn index(&self, column: &str) -> &Value {
        match self.get(column) {
            Some(v) => v,
            None => panic!("row has no column {column:?}"),
        }
    }
}

impl fmt::Debug for Row {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// A JSON object of the columns, as `<row>` is written.
impl serde::Serialize for Row {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Same columns, order, lookups, comparisons and JSON as the B-tree it replaces.
    #[test]
    fn like_a_btree() {
        let cols = [
            ("vips", Value::map([("a", "b")])),
            ("name", Value::from("x")),
            ("vips", Value::map([("c", "d")])),
        ];
        let row: Row = cols.clone().into_iter().collect();
        let tree: BTreeMap<String, Value> =
            cols.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        assert!(row.iter().eq(tree.iter().map(|(k, v)| (k.as_str(), v))));
        assert_eq!(row["vips"], Value::map([("c", "d")]));
        assert_eq!(format!("{row:?}"), format!("{tree:?}"));
        assert_eq!(
            serde_json::to_string(&row).ok(),
            serde_json::to_string(&tree).ok()
        );

        let mut r2 = row.clone();
        assert_eq!(r2.insert("a", Value::from(1i64)), None);
        assert_eq!(
            r2.insert("a".to_owned(), Value::from(2i64)),
            Some(Value::from(1i64))
        );
        assert!(r2.keys().eq(["a", "name", "vips"]));
        assert!(r2 < row);
        assert_eq!(r2.remove("a"), Some(Value::from(2i64)));
        assert_eq!(r2.remove("a"), None);
        assert_eq!(r2, row);
        if let Some(v) = r2.get_mut("name") {
            *v = Value::from("y");
        }
        assert_eq!(r2.get("name"), Some(&Value::from("y")));
        assert!(r2.get("nope").is_none() && !r2.contains_key("nope"));
    }
}

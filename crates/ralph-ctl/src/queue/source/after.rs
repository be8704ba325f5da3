//! The order between a backlog's items: an item names the items it depends
//! on (`Item::after`), and is claimable only once each of them landed. A
//! source drops from `after` what it records as done itself (a prd story
//! that passes, a ticked box, a closed issue); what is left must be an item
//! of the backlog, and the items may not depend on each other in a cycle:
//! either would leave items no worker could ever take, so the backlog is
//! refused when it is read, naming them.

use std::collections::BTreeMap;

use super::{Item, QueueError};

/// Refuses `items` when one depends on an id no item has, or some depend
/// on each other in a cycle (named in order, the first again at the end).
pub(crate) fn check(items: &[Item]) -> Result<(), QueueError> {
    let index: BTreeMap<&str, &Item> = items.iter().map(|i| (i.id.as_str(), i)).collect();
    for item in items {
        if let Some(missing) = item.after.iter().find(|d| !index.contains_key(d.as_str())) {
            return Err(QueueError::MissingDependency {
                item: item.id.clone(),
                missing: missing.clone(),
            });
        }
    }
    // Depth first, each item's dependencies in their order: an item met
    // again while it is on the path closes a cycle.
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        OnPath,
        Done,
    }
    let mut marks: BTreeMap<&str, Mark> = BTreeMap::new();
    for start in items {
        if marks.contains_key(start.id.as_str()) {
            continue;
        }
        // The path, each with the index of its next dependency to visit.
        let mut path: Vec<(&Item, usize)> = vec![(start, 0)];
        marks.insert(&start.id, Mark::OnPath);
        while let Some((item, next)) = path.last_mut() {
            let Some(dependency) = item.after.get(*next) else {
                marks.insert(&item.id, Mark::Done);
                path.pop();
                continue;
            };
            *next += 1;
            match marks.get(dependency.as_str()) {
                Some(Mark::Done) => {}
                Some(Mark::OnPath) => {
                    let from = path
                        .iter()
                        .position(|(i, _)| i.id == *dependency)
                        .unwrap_or(0);
                    let mut cycle: Vec<String> =
                        path[from..].iter().map(|(i, _)| i.id.clone()).collect();
                    cycle.push(dependency.clone());
                    return Err(QueueError::DependencyCycle(cycle));
                }
                None => {
                    let Some(&next_item) = index.get(dependency.as_str()) else {
                        continue;
                    };
                    marks.insert(&next_item.id, Mark::OnPath);
                    path.push((next_item, 0));
                }
            }
        }
    }
    Ok(())
}

/// The ids named in `text` by lines such as `Depends on #12` or
/// `depends on: #3, #4` (any case), as a GitHub issue says what it waits
/// for: the numbers, in order, once each.
pub(crate) fn issue_numbers_depended_on(text: &str) -> Vec<String> {
    let mut numbers: Vec<String> = Vec::new();
    for line in text.lines() {
        let lower = line.trim().to_ascii_lowercase();
        let lower = lower.trim_start_matches(['-', '*', ' ']);
        let Some(rest) = lower.strip_prefix("depends on") else {
            continue;
        };
        for word in rest.split(|c: char| c.is_whitespace() || c == ',' || c == ':') {
            let Some(number) = word.strip_prefix('#') else {
                continue;
            };
            let number = number.trim_end_matches(['.', ';', ')']);
            if !number.is_empty()
                && number.bytes().all(|b| b.is_ascii_digit())
                && !numbers.iter().any(|n| n == number)
            {
                numbers.push(number.to_string());
            }
        }
    }
    numbers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str, after: &[&str]) -> Item {
        Item {
            author: None,
            id: id.into(),
            title: id.into(),
            body: String::new(),
            after: after.iter().map(std::string::ToString::to_string).collect(),
        }
    }

    #[test]
    fn an_order_without_cycles_passes() {
        let items = [
            item("A", &[]),
            item("B", &["A"]),
            item("C", &["A", "B"]),
            item("D", &["C"]),
        ];
        assert_eq!(check(&items), Ok(()));
    }

    #[test]
    fn a_cycle_is_refused_naming_its_items_in_order() {
        let items = [
            item("A", &[]),
            item("B", &["D"]),
            item("C", &["B"]),
            item("D", &["C"]),
        ];
        let refused = check(&items).unwrap_err();
        assert_eq!(
            refused,
            QueueError::DependencyCycle(vec!["B".into(), "D".into(), "C".into(), "B".into()])
        );
        let said = refused.to_string();
        assert!(said.contains("B → D → C → B"), "{said}");
        // An item depending on itself.
        assert_eq!(
            check(&[item("S", &["S"])]),
            Err(QueueError::DependencyCycle(vec!["S".into(), "S".into()]))
        );
    }

    #[test]
    fn a_dependency_no_item_has_is_refused_naming_both() {
        let said = check(&[item("A", &["Z"])]).unwrap_err().to_string();
        assert!(said.contains("A depends on Z"), "{said}");
    }

    #[test]
    fn an_issue_says_what_it_depends_on() {
        let body =
            "Fix the parser.\n\nDepends on #12\n- depends on: #3, #4.\nNot #5.\ndepends on #12";
        assert_eq!(issue_numbers_depended_on(body), ["12", "3", "4"]);
        assert!(issue_numbers_depended_on("See #7").is_empty());
    }
}

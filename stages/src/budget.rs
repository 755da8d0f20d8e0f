//! Splitting a token budget between blocks.
//!
//! Blocks come in rank order. Must-include blocks (MCP `annotations.priority` 1.0) are
//! served first, each up to its cost. The rest share what is left by water-filling: the
//! cheapest blocks are served whole first, and each block's share is what is left
//! divided by the blocks still waiting, so what a small block does not use flows to the
//! larger ones. The allowances never add up to more than the budget.

/// What one block would cost whole, and whether it must be included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    /// Tokens the block costs whole (exact, or an upper estimate for a large text).
    pub cost: usize,
    /// Served before the others (priority 1.0).
    pub must: bool,
}

/// Token allowances for `needs` (same order), summing to at most `budget`.
pub fn allocate(budget: usize, needs: &[Need]) -> Vec<usize> {
    let mut out = vec![0; needs.len()];
    let mut left = budget;
    for (i, n) in needs.iter().enumerate().filter(|(_, n)| n.must) {
        out[i] = n.cost.min(left);
        left -= out[i];
    }
    let mut rest: Vec<usize> = (0..needs.len()).filter(|&i| !needs[i].must).collect();
    rest.sort_by_key(|&i| (needs[i].cost, i));
    let mut waiting = rest.len();
    for i in rest {
        let share = left / waiting.max(1);
        out[i] = needs[i].cost.min(share);
        left -= out[i];
        waiting -= 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn must_first_then_cheapest_whole() {
        let needs = [
            Need {
                cost: 1000,
                must: false,
            },
            Need {
                cost: 300,
                must: true,
            },
            Need {
                cost: 50,
                must: false,
            },
            Need {
                cost: 400,
                must: false,
            },
        ];
        // 300 for the must; 200 left over three: 50 whole, then 75 and 75.
        assert_eq!(allocate(500, &needs), [75, 300, 50, 75]);
    }

    proptest! {
        #[test]
        fn never_more_than_the_budget_nor_a_block_cost(
            budget in 0usize..20_000,
            needs in proptest::collection::vec((0usize..10_000, any::<bool>()), 0..40),
        ) {
            let needs: Vec<Need> = needs.into_iter().map(|(cost, must)| Need { cost, must }).collect();
            let out = allocate(budget, &needs);
            prop_assert!(out.iter().sum::<usize>() <= budget);
            for (a, n) in out.iter().zip(&needs) {
                prop_assert!(*a <= n.cost);
            }
            // Nothing is left unused while a block still wants more.
            if out.iter().sum::<usize>() < budget {
                prop_assert!(out.iter().zip(&needs).all(|(a, n)| *a == n.cost));
            }
        }
    }
}

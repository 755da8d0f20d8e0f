//! Splitting a token budget between blocks that come in rank order.
//!
//! 1. Must-include blocks (MCP `annotations.priority` 1.0) first: those that cannot be
//!    shrunk take their whole cost while it fits, in rank order; the shrinkable ones share
//!    what is left by water-filling.
//! 2. Other blocks that cannot be shrunk (images, notes, texts whose strategy is `whole`)
//!    take their whole cost, in rank order, while it fits; an image (`yields`) only
//!    while it leaves the shrinkable blocks waiting at least half of what is left: an
//!    unrelated picture must not take the room of the text that answers.
//! 3. The remaining shrinkable blocks share what is left by water-filling: the cheapest
//!    are served whole first, each block's share is what is left divided by the blocks
//!    still waiting, so what a small block does not use flows to the larger ones.
//!    When that would leave a block less than its useful minimum, the lowest-ranked
//!    block is dropped instead and the rest share again: fewer blocks, no scraps.
//!
//! The allowances never add up to more than the budget, no block gets more than its
//! cost, and a block that cannot be shrunk gets its whole cost or nothing.

/// What one block needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Need {
    /// Tokens the block costs whole (exact, or an upper estimate for a large text).
    pub cost: usize,
    /// Must be included (priority 1.0): served before the others.
    pub must: bool,
    /// Whether a smaller allowance still yields something (chunk, summary, truncation).
    pub shrinkable: bool,
    /// Below this many tokens a shrunk block is not worth sending.
    pub min_useful: usize,
    /// Scope rank (higher is narrower: message > conversation > pipeline).
    pub tier: u8,
    /// What a must-include block at a wider scope leaves it, at most its cost: the
    /// useful minimum of an attachment the user made more narrowly.
    pub reserve: usize,
    /// An image that is not a must: whole only while it takes at most half of what is
    /// left when shrinkable blocks are waiting (their relevance is known, its is not).
    pub yields: bool,
}

fn water_fill(out: &mut [usize], needs: &[Need], indices: &[usize], left: &mut usize) {
    let mut order = indices.to_vec();
    order.sort_by_key(|&i| (needs[i].cost, i));
    let mut waiting = order.len();
    for i in order {
        let share = *left / waiting.max(1);
        out[i] = needs[i].cost.min(share);
        *left -= out[i];
        waiting -= 1;
    }
}

/// Token allowances for `needs` (rank order, same order out).
pub fn allocate(budget: usize, needs: &[Need]) -> Vec<usize> {
    let mut out = vec![0; needs.len()];
    // Must-include blocks go first, but not at the expense of a block attached at a
    // narrower scope (the user's own attachment): each of those keeps its useful minimum.
    let lowest_must = needs.iter().filter(|n| n.must).map(|n| n.tier).min();
    let reserve: usize = needs
        .iter()
        .filter(|n| !n.must && lowest_must.is_some_and(|t| n.tier > t))
        .map(|n| n.cost.min(n.reserve))
        .sum::<usize>()
        .min(budget);
    let mut left = budget - reserve;
    let whole_if_fits = |out: &mut Vec<usize>, left: &mut usize, i: usize| {
        if needs[i].cost <= *left {
            out[i] = needs[i].cost;
            *left -= needs[i].cost;
        }
    };
    for i in (0..needs.len()).filter(|&i| needs[i].must && !needs[i].shrinkable) {
        whole_if_fits(&mut out, &mut left, i);
    }
    let musts: Vec<usize> = (0..needs.len())
        .filter(|&i| needs[i].must && needs[i].shrinkable)
        .collect();
    water_fill(&mut out, needs, &musts, &mut left);
    left += reserve;
    let texts_wait = needs.iter().any(|n| !n.must && n.shrinkable);
    for i in (0..needs.len()).filter(|&i| !needs[i].must && !needs[i].shrinkable) {
        if needs[i].yields && texts_wait && needs[i].cost > left / 2 {
            continue;
        }
        whole_if_fits(&mut out, &mut left, i);
    }
    let mut rest: Vec<usize> = (0..needs.len())
        .filter(|&i| !needs[i].must && needs[i].shrinkable)
        .collect();
    loop {
        let mut trial = out.clone();
        let mut trial_left = left;
        water_fill(&mut trial, needs, &rest, &mut trial_left);
        let scrap = rest
            .iter()
            .any(|&i| trial[i] < needs[i].cost.min(needs[i].min_useful));
        if !scrap || rest.len() <= 1 {
            return trial;
        }
        // Drop the lowest-ranked (last) block and share again.
        rest.pop();
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn shrinkable(cost: usize) -> Need {
        Need {
            cost,
            must: false,
            shrinkable: true,
            min_useful: 64,
            tier: 0,
            reserve: 64,
            yields: false,
        }
    }

    #[test]
    fn an_image_leaves_waiting_texts_half_of_what_is_left() {
        let image = Need {
            shrinkable: false,
            yields: true,
            ..shrinkable(255)
        };
        // 300 tokens: the image would leave the text 45; the text gets them all.
        assert_eq!(allocate(300, &[image, shrinkable(2000)]), [0, 300]);
        // 1000 tokens: the image takes its 255 and the text the rest.
        assert_eq!(allocate(1000, &[image, shrinkable(2000)]), [255, 745]);
        // Alone, it takes what fits, as before.
        assert_eq!(allocate(300, &[image]), [255]);
        // A `whole` text (not `yields`) still goes first.
        let whole = Need {
            yields: false,
            ..image
        };
        assert_eq!(allocate(300, &[whole, shrinkable(2000)]), [255, 45]);
    }

    #[test]
    fn a_must_does_not_starve_a_narrower_attachment() {
        let must = Need {
            must: true,
            ..shrinkable(1800)
        };
        let message = Need {
            tier: 2,
            ..shrinkable(15)
        };
        assert_eq!(allocate(300, &[message, must]), [15, 285]);
    }

    #[test]
    fn must_first_then_cheapest_whole() {
        let must = Need {
            must: true,
            ..shrinkable(300)
        };
        let needs = [shrinkable(1000), must, shrinkable(50), shrinkable(400)];
        // 300 for the must; 200 left over three: 50 whole, then 75 and 75.
        assert_eq!(allocate(500, &needs), [75, 300, 50, 75]);
    }

    #[test]
    fn an_unshrinkable_block_is_whole_or_nothing_and_goes_first() {
        let whole = Need {
            shrinkable: false,
            ..shrinkable(503)
        };
        assert_eq!(allocate(1000, &[whole, shrinkable(7200)]), [503, 497]);
        assert_eq!(allocate(500, &[whole, shrinkable(7200)]), [0, 500]);
    }

    #[test]
    fn many_blocks_do_not_become_scraps_lower_ranks_are_dropped() {
        let needs: Vec<Need> = (0..60).map(|_| shrinkable(200)).collect();
        let out = allocate(500, &needs);
        // 500 / 64 = 7 blocks can get 64 or more; the top-ranked ones are kept.
        let kept: Vec<usize> = (0..60).filter(|&i| out[i] > 0).collect();
        assert_eq!(kept, (0..7).collect::<Vec<_>>());
        assert!(kept.iter().all(|&i| out[i] >= 64));
    }

    proptest! {
        #[test]
        fn never_more_than_the_budget_nor_a_block_cost(
            budget in 0usize..20_000,
            needs in proptest::collection::vec((0usize..10_000, any::<bool>(), any::<bool>(), 0usize..200, 0u8..3), 0..40),
        ) {
            let needs: Vec<Need> = needs
                .into_iter()
                .map(|(cost, must, shrinkable, min_useful, tier)| Need { cost, must, shrinkable, min_useful, tier, reserve: min_useful, yields: false })
                .collect();
            let out = allocate(budget, &needs);
            prop_assert!(out.iter().sum::<usize>() <= budget);
            for (a, n) in out.iter().zip(&needs) {
                prop_assert!(*a <= n.cost);
                if !n.shrinkable {
                    prop_assert!(*a == 0 || *a == n.cost);
                }
            }
        }
    }
}

// The block manager and its prefix cache as pure logic: reference counts, publish and match,
// LRU eviction (tail first), stale children after a parent's eviction (epochs), duplicate
// publication, clear_cache; then thousands of random operations checked against a
// plain model of what the pool must hold.
#include "engine/block_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <vector>

namespace ferrox {
namespace {

constexpr int kBs = 4;

// Publishes `blocks` as the chain holding `tokens` (blocks.size() full blocks).
void publish_chain(BlockManager& pool, const std::vector<int32_t>& blocks,
                   const std::vector<int32_t>& tokens) {
    const int bs = pool.block_size();
    for (size_t i = 0; i < blocks.size(); ++i) {
        pool.publish(blocks[i], i > 0 ? blocks[i - 1] : -1, tokens.data() + i * bs);
    }
}

std::vector<int32_t> match(BlockManager& pool, const std::vector<int32_t>& tokens,
                           int max_blocks = 1 << 20) {
    std::vector<int32_t> out;
    const int n = pool.match_prefix(tokens, max_blocks, &out);
    EXPECT_EQ(n, static_cast<int>(out.size()));
    return out;
}

void release_all(BlockManager& pool, const std::vector<int32_t>& blocks) {
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) pool.release(*it);
}

std::vector<int32_t> iota_tokens(int n, int32_t first) {
    std::vector<int32_t> t(n);
    for (int i = 0; i < n; ++i) t[i] = first + i;
    return t;
}

TEST(BlockManager, AllocateReleaseRefcounts) {
    BlockManager pool(4, kBs);
    EXPECT_EQ(pool.n_blocks(), 4);
    EXPECT_EQ(pool.n_free(), 4);
    EXPECT_EQ(pool.n_used(), 0);
    std::set<int32_t> got;
    for (int i = 0; i < 4; ++i) {
        const int32_t b = pool.allocate();
        ASSERT_GE(b, 0);
        EXPECT_EQ(pool.ref_count(b), 1);
        EXPECT_FALSE(pool.published(b));
        got.insert(b);
    }
    EXPECT_EQ(got.size(), 4u);
    EXPECT_EQ(pool.n_free(), 0);
    EXPECT_EQ(pool.n_used(), 4);
    EXPECT_FALSE(pool.can_allocate(1));
    EXPECT_TRUE(pool.can_allocate(0));
    EXPECT_EQ(pool.allocate(), -1);

    const int32_t b = *got.begin();
    pool.retain(b);
    EXPECT_EQ(pool.ref_count(b), 2);
    pool.release(b);
    EXPECT_EQ(pool.ref_count(b), 1);
    EXPECT_EQ(pool.n_free(), 0);
    pool.release(b);
    EXPECT_EQ(pool.ref_count(b), 0);
    EXPECT_EQ(pool.n_free(), 1);
    EXPECT_EQ(pool.n_cached(), 0);
    EXPECT_EQ(pool.allocate(), b);  // the only free block
    for (int32_t x : got) pool.release(x);
    EXPECT_EQ(pool.n_free(), 4);
}

TEST(BlockManager, SeqBlocksReserveFailsKeepsWhatItGot) {
    BlockManager pool(3, kBs);
    SeqBlocks seq(&pool);
    EXPECT_TRUE(seq.reserve(9).is_ok());  // 3 blocks
    EXPECT_EQ(seq.capacity(), 12);
    EXPECT_TRUE(seq.reserve(12).is_ok());  // already covered: no allocation
    const Status st = seq.reserve(13);
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
    EXPECT_NE(st.message().find("13"), std::string::npos) << st.message();
    EXPECT_EQ(seq.blocks().size(), 3u);
    seq.clear();
    EXPECT_EQ(pool.n_free(), 3);
    SeqBlocks partial(&pool);
    SeqBlocks hog(&pool);
    ASSERT_TRUE(hog.reserve(4).is_ok());
    EXPECT_FALSE(partial.reserve(12).is_ok());
    EXPECT_EQ(partial.blocks().size(), 2u);  // what it could get stays owned
    EXPECT_EQ(pool.n_free(), 0);
}

TEST(BlockManager, MatchFindsLongestVerifiedChain) {
    BlockManager pool(16, kBs);
    const std::vector<int32_t> toks = iota_tokens(14, 100);  // 3 full blocks + 2
    SeqBlocks seq(&pool);
    ASSERT_TRUE(seq.reserve(14).is_ok());
    const std::vector<int32_t> blocks(seq.blocks().begin(), seq.blocks().begin() + 3);
    publish_chain(pool, blocks, toks);
    EXPECT_EQ(pool.n_cached(), 3);
    for (int32_t b : blocks) EXPECT_TRUE(pool.published(b));
    EXPECT_FALSE(pool.published(seq.blocks()[3]));  // partial block: never published

    std::vector<int32_t> got = match(pool, toks);
    EXPECT_EQ(got, blocks);
    for (int32_t b : blocks) EXPECT_EQ(pool.ref_count(b), 2);  // the match retains
    release_all(pool, got);

    EXPECT_EQ(match(pool, toks, 2), std::vector<int32_t>(blocks.begin(), blocks.begin() + 2));
    release_all(pool, std::vector<int32_t>(blocks.begin(), blocks.begin() + 2));
    EXPECT_TRUE(match(pool, toks, 0).empty());

    // Only full blocks of the query count.
    std::vector<int32_t> short_q(toks.begin(), toks.begin() + 7);
    got = match(pool, short_q);
    EXPECT_EQ(got, std::vector<int32_t>{blocks[0]});
    release_all(pool, got);

    // The first mismatching token ends the match, wherever it is in its block.
    for (int pos : {0, 3, 4, 5, 7, 8, 11}) {
        std::vector<int32_t> q = toks;
        q[pos] = 7;
        got = match(pool, q);
        EXPECT_EQ(static_cast<int>(got.size()), pos / kBs) << "mismatch at " << pos;
        release_all(pool, got);
    }
    // A later block's tokens after a different first block: the chain does not match.
    std::vector<int32_t> q = toks;
    q[0] = 1;
    EXPECT_TRUE(match(pool, q).empty());
    for (int32_t b : seq.blocks()) EXPECT_EQ(pool.ref_count(b), 1);
}

TEST(BlockManager, MatchRetainsAndTakesTheBlockOutOfTheLru) {
    BlockManager pool(4, kBs);
    const std::vector<int32_t> toks = iota_tokens(4, 1);
    const int32_t b = pool.allocate();
    pool.publish(b, -1, toks.data());
    pool.release(b);
    // Published and unreferenced: still cached, counted free, matchable.
    EXPECT_EQ(pool.ref_count(b), 0);
    EXPECT_TRUE(pool.published(b));
    EXPECT_EQ(pool.n_cached(), 1);
    EXPECT_EQ(pool.n_free(), 4);
    EXPECT_EQ(pool.n_used(), 0);

    std::vector<int32_t> got = match(pool, toks);
    ASSERT_EQ(got, std::vector<int32_t>{b});
    EXPECT_EQ(pool.ref_count(b), 1);
    EXPECT_EQ(pool.n_free(), 3);
    EXPECT_EQ(pool.n_used(), 1);
    // The matched block is no longer evictable: the others go, then nothing.
    std::vector<int32_t> others;
    for (int i = 0; i < 3; ++i) {
        others.push_back(pool.allocate());
        EXPECT_NE(others.back(), b);
        EXPECT_GE(others.back(), 0);
    }
    EXPECT_EQ(pool.allocate(), -1);
    EXPECT_TRUE(pool.published(b));
    got = match(pool, toks);  // a second holder
    EXPECT_EQ(pool.ref_count(b), 2);
    pool.release(b);
    pool.release(b);
    EXPECT_EQ(pool.n_free(), 1);
    EXPECT_EQ(pool.allocate(), b);  // evicted now: the only one left
    EXPECT_FALSE(pool.published(b));
    EXPECT_EQ(pool.n_cached(), 0);
    EXPECT_TRUE(match(pool, toks).empty());
}

TEST(BlockManager, EvictsLeastRecentlyReleasedFirst) {
    BlockManager pool(4, kBs);
    std::vector<std::vector<int32_t>> toks;
    std::vector<int32_t> blocks;
    for (int i = 0; i < 4; ++i) {
        toks.push_back(iota_tokens(4, 10 * (i + 1)));
        blocks.push_back(pool.allocate());
        pool.publish(blocks[i], -1, toks[i].data());
    }
    // Release order c, a, d, b.
    for (int i : {2, 0, 3, 1}) pool.release(blocks[i]);
    EXPECT_EQ(pool.n_free(), 4);
    EXPECT_EQ(pool.n_cached(), 4);

    EXPECT_EQ(pool.allocate(), blocks[2]);
    EXPECT_TRUE(match(pool, toks[2]).empty());
    // Matching a and releasing it again makes it the most recently released.
    ASSERT_EQ(match(pool, toks[0]).size(), 1u);
    pool.release(blocks[0]);
    EXPECT_EQ(pool.allocate(), blocks[3]);
    EXPECT_EQ(pool.allocate(), blocks[1]);
    EXPECT_EQ(pool.n_cached(), 1);
    EXPECT_EQ(match(pool, toks[0]), std::vector<int32_t>{blocks[0]});
    pool.release(blocks[0]);
    EXPECT_EQ(pool.allocate(), blocks[0]);
    EXPECT_EQ(pool.allocate(), -1);
    EXPECT_EQ(pool.n_cached(), 0);
}

TEST(BlockManager, UnpublishedBlocksAreTakenBeforeCachedOnes) {
    BlockManager pool(3, kBs);
    const std::vector<int32_t> toks = iota_tokens(4, 5);
    const int32_t cached = pool.allocate();
    pool.publish(cached, -1, toks.data());
    pool.release(cached);
    const int32_t a = pool.allocate();
    const int32_t b = pool.allocate();
    EXPECT_NE(a, cached);
    EXPECT_NE(b, cached);
    pool.release(a);  // unpublished: back to the free list, preferred over eviction
    EXPECT_EQ(pool.allocate(), a);
    EXPECT_EQ(match(pool, toks), std::vector<int32_t>{cached});
}

TEST(BlockManager, SequenceReleasedTailFirstKeepsItsPrefixLongest) {
    BlockManager pool(4, kBs);
    const std::vector<int32_t> toks = iota_tokens(16, 50);
    std::vector<int32_t> blocks;
    {
        SeqBlocks seq(&pool);
        ASSERT_TRUE(seq.reserve(16).is_ok());
        blocks = seq.blocks();
        publish_chain(pool, blocks, toks);
        seq.clear();
        EXPECT_TRUE(seq.blocks().empty());
    }
    EXPECT_EQ(pool.n_free(), 4);
    EXPECT_EQ(pool.n_cached(), 4);
    // The tail goes first; the prefix stays matchable.
    const int32_t x = pool.allocate();
    EXPECT_EQ(x, blocks[3]);
    {
        std::vector<int32_t> got = match(pool, toks);
        EXPECT_EQ(got, std::vector<int32_t>(blocks.begin(), blocks.begin() + 3));
        SeqBlocks seq(&pool);
        seq.adopt(got);
    }  // the destructor clears, tail first again
    EXPECT_EQ(pool.allocate(), blocks[2]);
    EXPECT_EQ(match(pool, toks).size(), 2u);
    EXPECT_EQ(pool.allocate(), -1);  // blocks 0 and 1 are held by the match
}

// A child published under a parent that is evicted and handed out again never matches, even
// when the parent's block comes back holding the very same tokens; republishing the child
// replaces the stale entry.
TEST(BlockManager, ChildOfAnEvictedParentNeverMatches) {
    BlockManager pool(3, kBs);
    const std::vector<int32_t> toks = iota_tokens(8, 200);
    const int32_t p = pool.allocate();
    const int32_t c = pool.allocate();
    publish_chain(pool, {p, c}, toks);
    pool.release(p);  // parent first: it is evicted before its child
    pool.release(c);
    EXPECT_EQ(pool.n_cached(), 2);
    const int32_t spare = pool.allocate();  // the never-used block
    EXPECT_NE(spare, p);
    EXPECT_NE(spare, c);
    EXPECT_EQ(pool.allocate(), p);  // evicts the parent; the child stays indexed
    EXPECT_FALSE(pool.published(p));
    EXPECT_TRUE(pool.published(c));
    EXPECT_EQ(pool.n_cached(), 1);
    EXPECT_TRUE(match(pool, toks).empty());

    // The same block, recomputed with the same tokens: the old child belongs to another epoch.
    pool.publish(p, -1, toks.data());
    std::vector<int32_t> got = match(pool, toks);
    EXPECT_EQ(got, std::vector<int32_t>{p});
    release_all(pool, got);

    // Republishing the child's prefix in another block replaces the stale entry, and the stale
    // block goes back to the free list (it was unreferenced).
    pool.release(spare);
    const int32_t c2 = pool.allocate();
    EXPECT_EQ(c2, spare);  // unpublished blocks go before cached ones
    const int n_free = pool.n_free();
    pool.publish(c2, p, toks.data() + 4);
    EXPECT_TRUE(pool.published(c2));
    EXPECT_FALSE(pool.published(c));
    EXPECT_EQ(pool.n_cached(), 2);
    EXPECT_EQ(pool.n_free(), n_free);
    got = match(pool, toks);
    EXPECT_EQ(got, (std::vector<int32_t>{p, c2}));
    release_all(pool, got);
    pool.release(c2);
    pool.release(p);
    EXPECT_EQ(pool.n_free(), 3);
    pool.clear_cache();
    EXPECT_EQ(pool.n_cached(), 0);
}

// The parent's block reused for other tokens: the child's chain is gone too.
TEST(BlockManager, ChildOfAReusedParentNeverMatches) {
    BlockManager pool(2, kBs);
    const std::vector<int32_t> toks = iota_tokens(8, 1);
    const int32_t p = pool.allocate();
    const int32_t c = pool.allocate();
    publish_chain(pool, {p, c}, toks);
    pool.release(p);
    pool.release(c);
    EXPECT_EQ(pool.allocate(), p);
    const std::vector<int32_t> other = iota_tokens(4, 90);
    pool.publish(p, -1, other.data());
    EXPECT_TRUE(match(pool, toks).empty());
    // A sequence holding `other` then the child's tokens must not pick up the stale child.
    std::vector<int32_t> q = other;
    q.insert(q.end(), toks.begin() + 4, toks.end());
    std::vector<int32_t> got = match(pool, q);
    EXPECT_EQ(got, std::vector<int32_t>{p});
    release_all(pool, got);
    pool.release(p);
}

TEST(BlockManager, DuplicatePublishKeepsTheFirst) {
    BlockManager pool(5, kBs);
    const std::vector<int32_t> toks = iota_tokens(8, 30);
    const int32_t a = pool.allocate();
    const int32_t a2 = pool.allocate();
    EXPECT_EQ(pool.publish(a, -1, toks.data()), a);
    // The same prefix again: the first block keeps standing for it and is answered.
    EXPECT_EQ(pool.publish(a2, -1, toks.data()), a);
    EXPECT_TRUE(pool.published(a));
    EXPECT_FALSE(pool.published(a2));
    EXPECT_EQ(pool.n_cached(), 1);
    // A child of the private duplicate cannot be published ...
    const int32_t b2 = pool.allocate();
    EXPECT_EQ(pool.publish(b2, a2, toks.data() + 4), -1);
    EXPECT_FALSE(pool.published(b2));
    EXPECT_EQ(pool.n_cached(), 1);
    // ... but it can under the block that was answered, and is then found after it.
    EXPECT_EQ(pool.publish(b2, a, toks.data() + 4), b2);
    EXPECT_EQ(pool.n_cached(), 2);
    std::vector<int32_t> got = match(pool, toks);
    EXPECT_EQ(got, (std::vector<int32_t>{a, b2}));
    release_all(pool, got);

    // The duplicate is private: released to zero it is free at once, not cached.
    pool.release(b2);
    pool.release(a2);
    pool.release(a);
    EXPECT_EQ(pool.n_free(), 5);
    EXPECT_EQ(pool.n_cached(), 2);
    std::set<int32_t> order;
    for (int i = 0; i < 3; ++i) order.insert(pool.allocate());
    EXPECT_FALSE(order.count(a));  // free blocks go before the cached ones
    EXPECT_FALSE(order.count(b2));
    EXPECT_TRUE(order.count(a2));
    EXPECT_EQ(match(pool, toks), (std::vector<int32_t>{a, b2}));
}

TEST(BlockManager, PublishIsIdempotentAndNeedsAPublishedParent) {
    BlockManager pool(4, kBs);
    const std::vector<int32_t> toks = iota_tokens(8, 3);
    const int32_t a = pool.allocate();
    const int32_t b = pool.allocate();
    EXPECT_EQ(pool.publish(b, a, toks.data() + 4), -1);  // parent not published: nothing happens
    EXPECT_FALSE(pool.published(b));
    EXPECT_EQ(pool.publish(a, -1, toks.data()), a);
    EXPECT_EQ(pool.publish(a, -1, toks.data()), a);
    EXPECT_EQ(pool.n_cached(), 1);
    EXPECT_EQ(pool.publish(b, a, toks.data() + 4), b);
    EXPECT_EQ(pool.n_cached(), 2);
    std::vector<int32_t> got = match(pool, toks);
    EXPECT_EQ(got, (std::vector<int32_t>{a, b}));
    release_all(pool, got);
    pool.release(b);
    pool.release(a);
}

// A block's epoch changes each time it is handed out, and only then: a holder of a block id it
// does not reference compares epochs to know the block still holds what it saw.
TEST(BlockManager, EpochChangesWhenTheBlockIsHandedOutAgain) {
    BlockManager pool(2, kBs);
    const std::vector<int32_t> toks = iota_tokens(4, 9);
    const int32_t a = pool.allocate();
    const uint32_t e = pool.epoch(a);
    pool.publish(a, -1, toks.data());
    pool.retain(a);
    pool.release(a);
    pool.release(a);  // cached, unreferenced
    EXPECT_EQ(pool.epoch(a), e);
    std::vector<int32_t> got = match(pool, toks);
    ASSERT_EQ(got, std::vector<int32_t>{a});
    EXPECT_EQ(pool.epoch(a), e);  // matched: the same content
    pool.release(a);
    const int32_t other = pool.allocate();  // the never-used block first
    EXPECT_NE(other, a);
    EXPECT_EQ(pool.allocate(), a);  // evicted and handed out again
    EXPECT_NE(pool.epoch(a), e);
    const uint32_t e2 = pool.epoch(a);
    pool.release(a);  // unpublished now: straight to the free list
    EXPECT_EQ(pool.epoch(a), e2);
    EXPECT_EQ(pool.allocate(), a);
    EXPECT_NE(pool.epoch(a), e2);
    pool.release(a);
    pool.release(other);
}

TEST(BlockManager, ClearCacheDropsOnlyUnreferencedBlocks) {
    BlockManager pool(6, kBs);
    const std::vector<int32_t> t1 = iota_tokens(8, 1), t2 = iota_tokens(8, 40);
    SeqBlocks held(&pool), dropped(&pool);
    ASSERT_TRUE(held.reserve(8).is_ok());
    ASSERT_TRUE(dropped.reserve(8).is_ok());
    publish_chain(pool, held.blocks(), t1);
    publish_chain(pool, dropped.blocks(), t2);
    const std::vector<int32_t> held_blocks = held.blocks();
    dropped.clear();
    EXPECT_EQ(pool.n_cached(), 4);
    EXPECT_EQ(pool.n_free(), 4);
    pool.clear_cache();
    EXPECT_EQ(pool.n_cached(), 2);
    EXPECT_EQ(pool.n_free(), 4);
    EXPECT_TRUE(match(pool, t2).empty());
    std::vector<int32_t> got = match(pool, t1);
    EXPECT_EQ(got, held_blocks);
    release_all(pool, got);
    held.clear();
    EXPECT_EQ(pool.n_cached(), 2);
    pool.clear_cache();
    EXPECT_EQ(pool.n_cached(), 0);
    EXPECT_EQ(pool.n_free(), 6);
    EXPECT_TRUE(match(pool, t1).empty());
}


// Random operations on a small pool against a plain model of it:
//   - who holds each block (sequences and extra pins), hence every reference count;
//   - what each block holds: the tokens from position 0 to its end and the block (and that
//     block's generation) it was computed after; a generation is bumped at each allocation;
//   - the cached, unreferenced blocks in the order they were last released (the LRU).
// Checked after every operation: reference counts and n_used/n_free/n_cached. Checked at each
// step: allocation takes an unpublished unreferenced block while there is one, else the least
// recently released cached block, and fails only when every block is referenced; publish()
// answers a block holding the same tokens; a match returns only blocks that hold exactly the
// query's tokens, each published under the very block (same generation) that precedes it in the
// match; and at least every published chain that is still intact. Half the sequences chain
// their publications as the engine does, through the block publish() answered (checked by
// epoch, since they may not hold it).
class BlockManagerRandom : public ::testing::TestWithParam<std::tuple<int, int, uint32_t>> {};

TEST_P(BlockManagerRandom, AgainstAReferenceModel) {
    const auto [bs, n_blocks, seed] = GetParam();
    BlockManager pool(n_blocks, bs);
    std::mt19937 rng(seed);
    auto rnd = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };

    struct Seq {
        std::unique_ptr<SeqBlocks> kv;
        std::vector<int32_t> tokens;  // tokens whose K/V are computed
        int n_published = 0;          // leading blocks offered to the cache (as the engine)
        bool caching = true;
        // How the sequence chains its publications. false: on its own previous block (a
        // duplicate ends its chain). true: as the engine, on the block that publish() returned
        // for the previous position, which it may not hold, so checked by epoch first.
        bool through = false;
        int32_t chain = -1;
        uint32_t chain_epoch = 0;
        std::vector<std::pair<int32_t, uint32_t>> canon;  // per block: the cache's block, its gen
    };
    std::vector<Seq> seqs;
    std::vector<int32_t> pins;  // extra references
    struct Content {
        std::vector<int32_t> tokens;  // positions 0 .. block end; empty: not computed
        int32_t link = -1;            // the parent it was published under, and that parent's gen
        uint32_t link_gen = 0;
    };
    std::vector<Content> content(n_blocks);
    std::vector<uint32_t> gen(n_blocks, 0);
    std::vector<int32_t> lru;  // published, unreferenced: least recently released first
    struct Chain {
        std::vector<int32_t> tokens;
        std::vector<int32_t> blocks;
        std::vector<uint32_t> gens;
    };
    std::vector<Chain> chains;  // the latest published chains, as published
    // A few shared prefixes over a small alphabet, so that prefixes repeat and collide.
    std::vector<std::vector<int32_t>> bases(3);
    for (auto& b : bases) {
        for (int i = 0; i < 12 * bs; ++i) b.push_back(rnd(1, 3));
    }
    const int max_len = std::min(12 * bs, n_blocks * bs);

    auto holders = [&] {
        std::vector<int> refs(n_blocks, 0);
        for (const Seq& s : seqs) {
            for (int32_t b : s.kv->blocks()) ++refs[b];
        }
        for (int32_t b : pins) ++refs[b];
        return refs;
    };
    auto lru_erase = [&](int32_t b) {
        lru.erase(std::remove(lru.begin(), lru.end(), b), lru.end());
    };
    // After pool.release(b): a published block whose last reference went is the newest in the LRU.
    auto released = [&](int32_t b) {
        if (pool.ref_count(b) == 0 && pool.published(b)) {
            ASSERT_EQ(std::count(lru.begin(), lru.end(), b), 0);
            lru.push_back(b);
        }
    };
    auto release = [&](int32_t b) {
        pool.release(b);
        released(b);
    };
    // SeqBlocks::clear releases the last block first.
    auto clear_seq = [&](Seq& s) {
        const std::vector<int32_t> blocks = s.kv->blocks();
        s.kv->clear();
        for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) released(*it);
    };
    // Blocks the pool unpublished (a stale entry replaced, clear_cache) left the LRU for the
    // free list.
    auto reconcile = [&] {
        lru.erase(
            std::remove_if(lru.begin(), lru.end(), [&](int32_t b) { return !pool.published(b); }),
            lru.end());
    };
    // `fresh` were allocated in this order, starting from reference counts `refs`.
    auto check_allocated = [&](const std::vector<int32_t>& fresh, std::vector<int> refs) {
        for (int32_t b : fresh) {
            ASSERT_GE(b, 0);
            ASSERT_LT(b, n_blocks);
            ASSERT_EQ(refs[b], 0) << "allocated the referenced block " << b;
            bool any_free = false;
            for (int x = 0; x < n_blocks; ++x) {
                any_free |= refs[x] == 0 && std::find(lru.begin(), lru.end(), x) == lru.end();
            }
            if (any_free) {
                ASSERT_EQ(std::count(lru.begin(), lru.end(), b), 0)
                    << "evicted while free blocks remain";
            } else {
                ASSERT_FALSE(lru.empty());
                ASSERT_EQ(b, lru.front()) << "not the least recently released cached block";
                lru.erase(lru.begin());
            }
            ASSERT_FALSE(pool.published(b));
            refs[b] = 1;
            content[b] = Content{};
            ++gen[b];
        }
    };
    auto check_invariants = [&](int op) {
        const std::vector<int> refs = holders();
        int n_used = 0, n_published = 0, n_evictable = 0;
        for (int b = 0; b < n_blocks; ++b) {
            ASSERT_EQ(pool.ref_count(b), refs[b]) << "block " << b << " op " << op;
            n_used += refs[b] > 0;
            n_published += pool.published(b);
            n_evictable += refs[b] == 0 && pool.published(b);
        }
        ASSERT_EQ(pool.n_used(), n_used) << "op " << op;
        ASSERT_EQ(pool.n_free(), n_blocks - n_used) << "op " << op;
        ASSERT_EQ(pool.n_cached(), n_published) << "op " << op;
        ASSERT_EQ(static_cast<int>(lru.size()), n_evictable) << "op " << op;
    };
    // Length of the longest prefix of `c` whose blocks still hold what they held.
    auto intact_len = [&](const Chain& c) {
        size_t k = 0;
        while (k < c.blocks.size() && gen[c.blocks[k]] == c.gens[k] && pool.published(c.blocks[k]))
            ++k;
        return static_cast<int>(k);
    };
    // Looks `tokens` up, checks the answer, returns the blocks (retained).
    auto checked_match = [&](const std::vector<int32_t>& tokens, int max_blocks) {
        std::vector<int32_t> out;
        const std::vector<int> refs = holders();
        const int n = pool.match_prefix(tokens, max_blocks, &out);
        EXPECT_EQ(n, static_cast<int>(out.size()));
        EXPECT_LE(n, max_blocks);
        EXPECT_LE(n, static_cast<int>(tokens.size()) / bs);
        for (int i = 0; i < n; ++i) {
            const int32_t b = out[i];
            const std::vector<int32_t> want(tokens.begin(), tokens.begin() + (i + 1) * bs);
            EXPECT_EQ(content[b].tokens, want) << "block " << b << " matched for the wrong tokens";
            EXPECT_EQ(content[b].link, i > 0 ? out[i - 1] : -1)
                << "block " << b << ": another parent";
            if (i > 0) {
                EXPECT_EQ(content[b].link_gen, gen[out[i - 1]])
                    << "block " << b << " was published under an earlier use of block "
                    << out[i - 1];
            }
            EXPECT_EQ(pool.ref_count(b), refs[b] + 1);
            lru_erase(b);
        }
        int must = 0;
        for (const Chain& c : chains) {
            const int k = std::min<int>(intact_len(c), max_blocks);
            int common = 0;  // leading full blocks of the chain that the query repeats
            while (common < k && static_cast<int>(tokens.size()) >= (common + 1) * bs &&
                   std::equal(tokens.begin() + common * bs, tokens.begin() + (common + 1) * bs,
                              c.tokens.begin() + common * bs)) {
                ++common;
            }
            must = std::max(must, common);
        }
        EXPECT_GE(n, must) << "an intact published chain was not found";
        return out;
    };
    // Computes the sequence up to `tokens` (reserving room) and offers its full blocks to the
    // cache. False when the pool has no room (the blocks it got stay with the sequence).
    auto extend = [&](Seq& s, const std::vector<int32_t>& tokens) {
        const std::vector<int> refs = holders();
        const size_t n_before = s.kv->blocks().size();
        int n_unref = 0;
        for (int r : refs) n_unref += r == 0;
        const int need =
            (static_cast<int>(tokens.size()) + bs - 1) / bs - static_cast<int>(n_before);
        const Status st = s.kv->reserve(static_cast<int>(tokens.size()));
        EXPECT_EQ(st.is_ok(), need <= n_unref) << "need " << need << ", unreferenced " << n_unref;
        check_allocated(
            std::vector<int32_t>(s.kv->blocks().begin() + n_before, s.kv->blocks().end()), refs);
        if (!st.is_ok()) return false;
        s.tokens = tokens;
        const auto& blocks = s.kv->blocks();
        // "Compute" the blocks that became full: each holds the tokens from 0 to its end.
        for (size_t i = 0; i < blocks.size() && (i + 1) * bs <= tokens.size(); ++i) {
            Content& c = content[blocks[i]];
            if (c.tokens.empty()) c.tokens.assign(tokens.begin(), tokens.begin() + (i + 1) * bs);
        }
        if (!s.caching) return true;
        // Every newly full block is offered, in order.
        while ((s.n_published + 1) * bs <= static_cast<int>(tokens.size())) {
            const int i = s.n_published++;
            int32_t parent = -1;
            if (i > 0 && s.through) {
                if (s.chain < 0 || pool.epoch(s.chain) != s.chain_epoch ||
                    !pool.published(s.chain)) {
                    s.chain = -1;  // the link broke: nothing after it can be found
                    s.canon.emplace_back(-1, 0);
                    continue;
                }
                parent = s.chain;
            } else if (i > 0) {
                parent = blocks[i - 1];
            }
            const bool parent_ok = parent < 0 || pool.published(parent);
            const bool was = pool.published(blocks[i]);
            const uint32_t parent_gen = parent >= 0 ? gen[parent] : 0;
            const int32_t got =
                pool.publish(blocks[i], parent, tokens.data() + static_cast<size_t>(i) * bs);
            reconcile();
            // publish() answers the block that stands for this prefix now, or -1.
            const std::vector<int32_t> want(tokens.begin(), tokens.begin() + (i + 1) * bs);
            if (!parent_ok) {
                EXPECT_EQ(got, -1);
            } else {
                EXPECT_GE(got, 0);
            }
            if (got >= 0) {
                EXPECT_TRUE(pool.published(got));
                EXPECT_EQ(content[got].tokens, want) << "publish answered a block of other tokens";
                EXPECT_EQ(got == blocks[i], pool.published(blocks[i]));
            }
            if (got == blocks[i] && !was && parent >= 0) {
                // The parent holds this block's preceding tokens (what the epoch check is for).
                EXPECT_TRUE(std::equal(content[parent].tokens.begin(), content[parent].tokens.end(),
                                       want.begin()) &&
                            content[parent].tokens.size() == want.size() - bs)
                    << "block " << blocks[i] << " published under block " << parent
                    << " of other tokens";
            }
            if (got == blocks[i] && !was) {
                content[blocks[i]].link = parent;
                content[blocks[i]].link_gen = parent_gen;
            }
            s.chain = got;
            if (got >= 0) s.chain_epoch = pool.epoch(got);
            s.canon.emplace_back(got, got >= 0 ? gen[got] : 0);
        }
        Chain c;  // the cache's blocks for the sequence's leading positions
        for (size_t i = 0; i < s.canon.size() && s.canon[i].first >= 0; ++i) {
            c.blocks.push_back(s.canon[i].first);
            c.gens.push_back(s.canon[i].second);
        }
        c.tokens.assign(tokens.begin(), tokens.begin() + c.blocks.size() * bs);
        if (!c.blocks.empty()) chains.push_back(std::move(c));
        if (chains.size() > 64) chains.erase(chains.begin());
        return true;
    };
    auto random_tokens = [&](int len) {
        std::vector<int32_t> t;
        if (chains.size() >= 2 && rnd(0, 2) == 0) {
            // The first blocks of one published chain, then the later blocks of another: what
            // would pick up a child under the wrong parent.
            const Chain& a = chains[rnd(0, static_cast<int>(chains.size()) - 1)];
            const Chain& b = chains[rnd(0, static_cast<int>(chains.size()) - 1)];
            const size_t i = rnd(0, static_cast<int>(a.blocks.size()));
            t.assign(a.tokens.begin(), a.tokens.begin() + i * bs);
            if (b.tokens.size() > t.size())
                t.insert(t.end(), b.tokens.begin() + t.size(), b.tokens.end());
            t.resize(std::min<size_t>(t.size(), len));
        } else if (rnd(0, 3) > 0) {
            const auto& b = bases[rnd(0, 2)];
            t.assign(b.begin(), b.begin() + std::min<int>(len, b.size()));
        }
        while (static_cast<int>(t.size()) < len) t.push_back(rnd(1, 3));
        if (rnd(0, 3) == 0) t[rnd(0, len - 1)] = rnd(1, 3);
        return t;
    };

    const int n_ops = 6000;
    for (int op = 0; op < n_ops; ++op) {
        const int kind = rnd(0, 99);
        if (kind < 30 && seqs.size() < 8) {
            // A new sequence: match its prefix (or not), then compute the rest.
            seqs.emplace_back();
            Seq& s = seqs.back();
            s.kv = std::make_unique<SeqBlocks>(&pool);
            s.caching = rnd(0, 4) > 0;
            s.through = rnd(0, 1) == 0;
            const std::vector<int32_t> tokens = random_tokens(rnd(1, max_len));
            if (s.caching) {
                std::vector<int32_t> got =
                    checked_match(tokens, rnd(0, 3) == 0 ? rnd(0, 3) : 1 << 20);
                s.kv->adopt(got);
                s.n_published = static_cast<int>(got.size());
                for (int32_t b : got) s.canon.emplace_back(b, gen[b]);
                s.chain = got.empty() ? -1 : got.back();
                s.chain_epoch = got.empty() ? 0 : pool.epoch(got.back());
            }
            if (!extend(s, tokens)) {
                clear_seq(s);
                seqs.pop_back();
            }
        } else if (kind < 45 && !seqs.empty()) {
            // A sequence grows (generation): more tokens, new blocks, new publications.
            const int i = rnd(0, static_cast<int>(seqs.size()) - 1);
            std::vector<int32_t> tokens = seqs[i].tokens;
            const int add = rnd(1, 2 * bs);
            for (int k = 0; k < add && static_cast<int>(tokens.size()) < max_len; ++k)
                tokens.push_back(rnd(1, 3));
            if (!extend(seqs[i], tokens)) {
                clear_seq(seqs[i]);  // out of room: dropped (preempted)
                seqs.erase(seqs.begin() + i);
            }
        } else if (kind < 70 && !seqs.empty()) {
            const int i = rnd(0, static_cast<int>(seqs.size()) - 1);
            if (rnd(0, 1) == 0) {
                clear_seq(seqs[i]);
            } else {
                // In any order (as when other holders let go later), so that a parent can be
                // evicted before its child.
                std::vector<int32_t> blocks = seqs[i].kv->blocks();
                for (int32_t b : blocks) pool.retain(b);
                clear_seq(seqs[i]);
                std::shuffle(blocks.begin(), blocks.end(), rng);
                for (int32_t b : blocks) release(b);
            }
            seqs.erase(seqs.begin() + i);
        } else if (kind < 80) {
            // A lookup that takes nothing (the engine's admission test when the pool is short).
            const std::vector<int32_t> got = checked_match(random_tokens(rnd(1, max_len)), 1 << 20);
            for (auto it = got.rbegin(); it != got.rend(); ++it) release(*it);
        } else if (kind < 88 && !seqs.empty()) {
            // Another holder of a block.
            const Seq& s = seqs[rnd(0, static_cast<int>(seqs.size()) - 1)];
            if (!s.kv->blocks().empty()) {
                const int32_t b =
                    s.kv->blocks()[rnd(0, static_cast<int>(s.kv->blocks().size()) - 1)];
                pool.retain(b);
                pins.push_back(b);
            }
        } else if (kind < 96 && !pins.empty()) {
            const int i = rnd(0, static_cast<int>(pins.size()) - 1);
            const int32_t b = pins[i];
            pins.erase(pins.begin() + i);
            release(b);
        } else if (kind < 98) {
            pool.clear_cache();
            reconcile();
            ASSERT_TRUE(lru.empty());
        } else {
            // Raw allocation until the pool says no, then everything back.
            const std::vector<int> refs = holders();
            int n_unref = 0;
            for (int r : refs) n_unref += r == 0;
            std::vector<int32_t> got;
            for (int32_t b; (b = pool.allocate()) >= 0;) got.push_back(b);
            EXPECT_EQ(static_cast<int>(got.size()), n_unref);
            check_allocated(got, refs);
            EXPECT_EQ(pool.n_free(), 0);
            for (int32_t b : got) release(b);
        }
        check_invariants(op);
        if (::testing::Test::HasFailure()) FAIL() << "stopped at op " << op;
    }
    // Everything back: release all, clear the cache: every block is free and unpublished.
    for (Seq& s : seqs) clear_seq(s);
    seqs.clear();
    for (int32_t b : pins) release(b);
    pins.clear();
    EXPECT_EQ(pool.n_used(), 0);
    EXPECT_EQ(pool.n_free(), n_blocks);
    pool.clear_cache();
    EXPECT_EQ(pool.n_cached(), 0);
    EXPECT_EQ(pool.n_free(), n_blocks);
    std::set<int32_t> all;
    for (int i = 0; i < n_blocks; ++i) all.insert(pool.allocate());
    EXPECT_EQ(static_cast<int>(all.size()), n_blocks);
    EXPECT_FALSE(all.count(-1));
    EXPECT_EQ(pool.allocate(), -1);
}

// Pins (cache_control breakpoints): a pinned prefix is evicted after every unpinned cached block,
// and before its time only when nothing else is left (counted); a pin that ran out protects
// nothing; the eviction hook sees each cached block before it is handed out again.
TEST(BlockManager, PinnedPrefixesAreEvictedLast) {
    BlockManager pool(6, kBs);
    pool.set_now(1000);
    std::vector<int32_t> evicted;
    pool.set_evict_hook([&](int32_t b) {
        EXPECT_TRUE(pool.published(b));  // still indexed when the hook sees it
        evicted.push_back(b);
    });
    const auto ta = iota_tokens(2 * kBs, 100), tb = iota_tokens(2 * kBs, 500);
    std::vector<int32_t> a = {pool.allocate(), pool.allocate()}, b = {pool.allocate(), pool.allocate()};
    publish_chain(pool, a, ta);
    publish_chain(pool, b, tb);
    EXPECT_EQ(pool.pin_prefix(ta, 2, 61000), 2);
    EXPECT_EQ(pool.pin_prefix(iota_tokens(2 * kBs, 900), 2, 61000), 0);  // not cached: nothing
    release_all(pool, a);  // released first: the plain LRU would evict a first
    release_all(pool, b);
    EXPECT_EQ(pool.n_pinned_cached(), 2);
    // Two free blocks, then b's (unpinned), then a's only when nothing else is left.
    for (int i = 0; i < 4; ++i) ASSERT_GE(pool.allocate(), 0);
    EXPECT_EQ(evicted, (std::vector<int32_t>{b[1], b[0]}));
    EXPECT_EQ(match(pool, ta).size(), 2u);  // a is still there
    release_all(pool, a);
    EXPECT_EQ(pool.n_pins_broken(), 0u);
    const int32_t forced = pool.allocate();
    EXPECT_EQ(forced, a[1]);  // the tail of the pinned prefix goes first
    EXPECT_EQ(pool.n_pins_broken(), 1u);
    EXPECT_EQ(evicted.size(), 3u);
}

TEST(BlockManager, APinThatRanOutProtectsNothing) {
    BlockManager pool(3, kBs);
    pool.set_now(0);
    const auto ta = iota_tokens(kBs, 100), tb = iota_tokens(kBs, 500);
    const int32_t a = pool.allocate(), b = pool.allocate();
    pool.publish(a, -1, ta.data());
    pool.publish(b, -1, tb.data());
    pool.pin_prefix(ta, 1, 5000);
    pool.release(a);
    pool.release(b);
    ASSERT_GE(pool.allocate(), 0);  // the free block
    pool.set_now(5001);  // a's pin ran out: it ages from now, behind b
    EXPECT_EQ(pool.allocate(), b);
    EXPECT_EQ(pool.allocate(), a);
    EXPECT_EQ(pool.n_pins_broken(), 0u);
    for (int32_t x : {0, 1, 2}) pool.release(x);
    // Re-pinning renews: the later time wins, an earlier one does not shorten it.
    const int32_t c = pool.allocate();
    pool.publish(c, -1, tb.data());
    pool.pin_prefix(tb, 1, 9000);
    pool.pin_prefix(tb, 1, 6000);
    pool.set_now(8000);
    EXPECT_TRUE(pool.pinned(c));
    pool.set_now(9000);
    EXPECT_FALSE(pool.pinned(c));
}

INSTANTIATE_TEST_SUITE_P(Seeds, BlockManagerRandom,
                         ::testing::Values(std::make_tuple(4, 24, 1u), std::make_tuple(4, 12, 2u),
                                           std::make_tuple(1, 16, 3u), std::make_tuple(2, 40, 4u),
                                           std::make_tuple(8, 10, 5u), std::make_tuple(4, 6, 6u)));

}  // namespace
}  // namespace ferrox

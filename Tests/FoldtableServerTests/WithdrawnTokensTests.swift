import Testing

@testable import FoldtableServer

/// The withdrawn-token list: ids kept until their tokens would have expired, and bounded.
@Suite struct WithdrawnTokensTests {
    let now: UInt64 = 1_800_000_000

    @Test func anIdIsRefusedUntilItsEndAndForgottenAfter() {
        var list = WithdrawnTokens()
        let added = list.add("a", until: now + 10, now: now)
        #expect(added)
        #expect(list.contains("a", now: now))
        #expect(list.contains("a", now: now + 9))
        #expect(!list.contains("a", now: now + 10))
        #expect(!list.contains("b", now: now))
        list.prune(now: now + 10)
        #expect(list.count == 0)
    }

    @Test func anIdWhoseTokenHasExpiredAlreadyIsNotKept() {
        var list = WithdrawnTokens()
        let added = list.add("late", until: now, now: now)
        #expect(!added)
        #expect(list.count == 0)
    }

    @Test func anIdWithdrawnTwiceKeepsTheLaterEnd() {
        var list = WithdrawnTokens()
        list.add("a", until: now + 100, now: now)
        list.add("a", until: now + 10, now: now)
        #expect(list.until["a"] == now + 100)
        #expect(list.count == 1)
    }

    @Test func aFullListStillTakesEveryWithdrawalAndOnlyMintingWaitsForRoom() {
        var list = WithdrawnTokens()
        for index in 0..<WithdrawnTokens.maxCount {
            let added = list.add("id\(index)", until: now + (index == 0 ? 5 : 1_000), now: now)
            #expect(added)
        }
        #expect(!list.hasRoom(now: now))
        // A full list never lets a withdrawn token back in: the withdrawal is kept all the same.
        let added = list.add("one-more", until: now + 1_000, now: now)
        #expect(added)
        #expect(list.contains("one-more", now: now))
        // Once the first id's token has expired there is room to mint again.
        #expect(list.hasRoom(now: now + 5))
        #expect(!list.contains("id0", now: now + 5))
    }
}

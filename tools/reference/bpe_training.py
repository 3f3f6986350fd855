"""Plain BPE training for the fixture tokenizers (clip_fixtures.py, whisper_fixtures.py): the most frequent
adjacent pair, counted over the words weighted by their frequency, is merged first; ties go to the smallest
pair; a pair whose merged string is already a token is never chosen, so every merge adds exactly one
vocabulary entry (the layout CLIP's and Whisper's vocabularies assume)."""


def learn_merges(words, count, taken):
    """words: {tuple of symbols: frequency}, the corpus as the tokenizer pre-tokenizes it; taken: the tokens
    that already exist. Returns `count` merges as (left, right) pairs, in rank order."""
    merges = []
    taken = set(taken)
    while len(merges) < count:
        counts = {}
        for word, n in words.items():
            for pair in zip(word, word[1:]):
                if pair[0] + pair[1] not in taken:
                    counts[pair] = counts.get(pair, 0) + n
        if not counts:
            raise RuntimeError(f"the corpus gives only {len(merges)} merges")
        best = min(counts, key=lambda p: (-counts[p], p))
        merges.append(best)
        taken.add(best[0] + best[1])
        words = merge_pair(words, best)
    return merges


def merge_pair(words, pair):
    """{word (a tuple of symbols): count} with every occurrence of the adjacent pair merged, left to right."""
    merged = {}
    for word, n in words.items():
        out, i = [], 0
        while i < len(word):
            if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
                out.append(word[i] + word[i + 1])
                i += 2
            else:
                out.append(word[i])
                i += 1
        merged[tuple(out)] = merged.get(tuple(out), 0) + n
    return merged

"""A learner's own optimal bucket search in plain Python (dynamic programming over the distinct lengths),
a correct answer to lab 04's bucket exercise; its flags make the two wrong variants the catalogue needs."""
import collections
import math


def dp_buckets(lengths, L, budget, *, exactly=False, without_L=False):
    """Least waste with at most ``budget`` buckets, the last at L. Wrong on purpose: ``exactly`` uses all
    ``budget`` buckets even when fewer waste less; ``without_L`` forgets that L must be a bucket."""
    values = sorted(set(lengths)) if without_L else sorted(set(lengths) | {L})
    count = collections.Counter(lengths)
    n_before, t_before = [0], [0]
    for v in values:
        n_before.append(n_before[-1] + count[v])
        t_before.append(t_before[-1] + count[v] * v)

    def waste(i, j):
        return values[j] * (n_before[j + 1] - n_before[i]) - (t_before[j + 1] - t_before[i])

    m = len(values)
    best, back = [[waste(0, j) for j in range(m)]], [[None] * m]
    for _ in range(2, budget + 1):
        row, brow = [math.inf] * m, [None] * m
        for j in range(m):
            for i in range(j):
                if best[-1][i] + waste(i + 1, j) < row[j]:
                    row[j], brow[j] = best[-1][i] + waste(i + 1, j), i
        best.append(row)
        back.append(brow)
    b = len(best) - 1 if exactly else min(range(len(best)), key=lambda b: best[b][m - 1])
    chosen, j = [], m - 1
    while j is not None and b >= 0:
        chosen.append(values[j])
        j, b = back[b][j], b - 1
    return sorted(chosen)

"""Small statistics helpers."""
import math


def mean(xs):
    """The arithmetic mean of xs."""
    if not xs:
        raise ValueError("mean of an empty list")
    return sum(xs) / len(xs)


def variance(xs):
    """The population variance of xs."""
    m = mean(xs)
    return sum((x - m) ** 2 for x in xs) / len(xs)


def stdev(xs):
    """The population standard deviation of xs."""
    return math.sqrt(variance(xs))


def zscores(xs):
    """Each value's distance from the mean in standard deviations."""
    m, s = mean(xs), stdev(xs)
    return [(x - m) / s for x in xs]


if __name__ == "__main__":
    data = [2, 4, 4, 4, 5, 5, 7, 9]
    print(mean(data), variance(data), stdev(data))
    print(zscores(data))

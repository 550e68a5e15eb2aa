"""Paddle's own Fleet example programs (third-party, Apache-2.0) run through fleet_c.

The programs live outside the project, in ../shared/paddle-programs from the repository
root (FLEET_PADDLE_PROGRAMS names another copy); they are never copied into the tree.  A
test copies one program's folder into its temporary directory with ``prepare``, which
changes the text of each .py file in at most four ways, all listed here:

1. ``rewrite_imports``: the import lines, by one mechanical rule (below).
2. ``PY3_FIXES``: Python-2 idioms that fail on Python 3 with real Paddle as well
   (``import commands``, ``time.clock``), per file.
3. ``UPSTREAM_FIXES``: upstream bugs that fail on Paddle too, per file, each with why.

and, where a test asks for it, a fourth: ``CONFIGURATION``, values of a program's own
configuration file (word2vec's conf.py) set for the small generated data, each with why.

Nothing else in a program is changed; what a program needs beyond that is fleet_c's to
provide (docs/python.md lists, per program, what it needed).
"""
import os
import re
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def programs_dir():
    """The folder of Paddle's programs: FLEET_PADDLE_PROGRAMS, else ../shared/paddle-programs
    beside the repository (None when absent: the tests skip, saying so)."""
    d = os.environ.get("FLEET_PADDLE_PROGRAMS") or os.path.join(os.path.dirname(ROOT), "shared", "paddle-programs")
    return d if os.path.isdir(d) else None


_IMPORT = re.compile(r"^(?P<ind>\s*)import\s+paddle(?P<sub>(?:\.\w+)*)(?:\s+as\s+(?P<alias>\w+))?\s*(?P<rest>#.*)?$")
_FROM = re.compile(r"^(?P<ind>\s*)from\s+paddle(?P<sub>(?:\.\w+)*)(?P<imp>\s+import\s)")


def rewrite_imports(text):
    """The one import rule: every import of the package ``paddle`` imports ``fleet_c``
    instead, under the name the program used.

    - ``import paddle``                  -> ``import fleet_c as paddle``
    - ``import paddle.X.Y as Z``         -> ``import fleet_c.X.Y as Z``
    - ``import paddle.X.Y``              -> ``import fleet_c.X.Y; import fleet_c as paddle``
      (Python binds ``paddle``: the program then says ``paddle.X.Y``)
    - ``from paddle.X import Y``         -> ``from fleet_c.X import Y``

    Indented imports (inside functions) are rewritten the same way; no other line changes.
    """
    out = []
    for line in text.splitlines(True):
        nl = "\n" if line.endswith("\n") else ""
        body = line[:len(line) - len(nl)]
        m = _IMPORT.match(body)
        if m:
            ind, sub, alias = m.group("ind"), m.group("sub"), m.group("alias")
            if not sub:
                body = "%simport fleet_c as %s" % (ind, alias or "paddle")
            elif alias:
                body = "%simport fleet_c%s as %s" % (ind, sub, alias)
            else:
                body = "%simport fleet_c%s; import fleet_c as paddle" % (ind, sub)
        else:
            m = _FROM.match(body)
            if m:
                body = m.group("ind") + "from fleet_c" + m.group("sub") + m.group("imp") + body[m.end():]
        out.append(body + nl)
    return "".join(out)


# Python 3: what Paddle on Python 3 needs as well.  file -> [(old, new)] (each old must occur).
_COMMANDS = ("import commands", "import subprocess as commands")
_CLOCK = ("time.clock()", "time.process_time()")
PY3_FIXES = {
    "deepFM/distribute_base.py": [_COMMANDS, _CLOCK],
    "simnet_bow/distribute_base.py": [_COMMANDS, _CLOCK],
}

# Upstream bugs that fail on Paddle too: file -> [(old, new, why)].
_ANTIALIAS = ("Image.ANTIALIAS", "Image.LANCZOS", "Pillow 10 removed the ANTIALIAS alias of LANCZOS (the same filter)")
_RANDOM_INTEGERS = "NumPy 2 removed np.random.random_integers(a, b, n); randint(a, b + 1, n) draws the same range"
UPSTREAM_FIXES = {
    "word2vec/dataset_generator.py": [
        ("np.random.random_integers(a, b, buf_size)", "np.random.randint(a, b + 1, buf_size)", _RANDOM_INTEGERS),
        ("np.random.random_integers(self.a, self.b,", "np.random.randint(self.a, self.b + 1,", _RANDOM_INTEGERS),
    ],
    "word2vec/dist_train_example.py": [
        ("def train(strategy):", "def train(strategy=None):",
         "train() is called without the argument it declares (TypeError on Paddle too); it sets strategy itself"),
        ("model_path = str(model_path) + '/trainer_'", "save_path = str(model_path) + '/trainer_'",
         "train() assigns model_path, so reading the module's model_path there raises UnboundLocalError (on Paddle "
         "too): the path gets its own name"),
        ("dirname=model_path)", "dirname=save_path)", "the same"),
    ],
    "word2vec/local_train_example.py": [
        ("model_path = str(model_path) + '/trainer_' + str(role.worker_index()) + '_epoch_'",
         "save_path = str(model_path) + '/trainer_0_epoch_'",
         "train() reads `role`, which the local program never defines (NameError on Paddle too; one local trainer: "
         "index 0), and assigns model_path, so reading the module's model_path there raises UnboundLocalError (on "
         "Paddle too): the path gets its own name"),
        ("dirname=model_path)", "dirname=save_path)", "the same"),
    ],
    "dgc_example/train.py": [_ANTIALIAS],
    "dgc_example/train_with_fleet.py": [
        _ANTIALIAS,
        ("\n    infer(\n", "\n    fleet.worker_index() == 0 and infer(\n",
         "every trainer loads the model only trainer 0 saves, with nothing making them wait for it: trainer 1 fails "
         "when it gets there first (on Paddle too); only trainer 0 infers"),
    ],
}


# A program's configuration file set for the test's small generated data: file -> [(old,
# new, why)].  Applied only where a test asks for it (prepare(..., configure=True)): the
# other programs of the folder run with the file as shipped.
CONFIGURATION = {
    "word2vec/conf.py": [
        ("dict_size = 354051", "dict_size = 50",
         "the dictionary of the generated data (write_word2vec: 50 words); the shipped 354051 x 300 tables, twice, "
         "are 850 MB, saved after each of ten epochs"),
    ],
}


def _apply(text, rel, fixes, what):
    for fix in fixes.get(rel, []):
        old, new = fix[0], fix[1]
        if old not in text:
            raise AssertionError("%s fix for %s: %r is not in the file (has the copy changed?)" % (what, rel, old))
        text = text.replace(old, new)
    return text


def transform(rel, text, configure=False):
    """One file's text as the tests run it: imports rewritten, then its listed fixes (and,
    with configure, its CONFIGURATION values)."""
    text = rewrite_imports(text)
    text = _apply(text, rel, PY3_FIXES, "Python-3")
    text = _apply(text, rel, UPSTREAM_FIXES, "upstream")
    return _apply(text, rel, CONFIGURATION, "configuration") if configure else text


def prepare(name, dest, configure=False):
    """Copies program folder ``name`` to dest (which must not exist), transforming its .py
    files (configure: with their CONFIGURATION values too); returns dest."""
    src = os.path.join(programs_dir(), name)
    shutil.copytree(src, str(dest))
    for base, _, files in os.walk(str(dest)):
        for f in files:
            if f.endswith(".py"):
                p = os.path.join(base, f)
                rel = os.path.relpath(p, os.path.dirname(str(dest)))
                with open(p, encoding="utf-8") as fh:
                    text = fh.read()
                with open(p, "w", encoding="utf-8") as fh:
                    fh.write(transform(rel.replace(os.sep, "/"), text, configure))
    return dest


# ---- data in each program's format ----------------------------------------------------------------


def write_mnist(d, n_train=2000, n_test=500, seed=7):
    """MNIST idx files (gzipped, Paddle's names) of a learnable 10-class task: class k
    lights up the k-th band of 78 pixels, plus noise.  Written to d/ (created)."""
    import gzip
    import struct

    import numpy as np
    os.makedirs(str(d), exist_ok=True)
    rng = np.random.RandomState(seed)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.randint(0, 10, size=n).astype(np.uint8)
        images = (rng.rand(n, 784) * 100).astype(np.uint8)
        for i, k in enumerate(labels):
            images[i, int(k) * 78:(int(k) + 1) * 78] += 150
        with gzip.open(os.path.join(str(d), "%s-images-idx3-ubyte.gz" % prefix), "wb") as f:
            f.write(struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
        with gzip.open(os.path.join(str(d), "%s-labels-idx1-ubyte.gz" % prefix), "wb") as f:
            f.write(struct.pack(">II", 2049, n) + labels.tobytes())
    return d


def write_word2vec(d, vocab=50, lines=200, files=2, seed=3):
    """word2vec's inputs: thirdparty/test_build_dict ("word count" lines, ids by line) and
    train_data/part-N (lines of word ids; words near each other in a line co-occur by
    topic: id // 10)."""
    import numpy as np
    rng = np.random.RandomState(seed)
    os.makedirs(os.path.join(str(d), "thirdparty"), exist_ok=True)
    os.makedirs(os.path.join(str(d), "train_data"), exist_ok=True)
    with open(os.path.join(str(d), "thirdparty", "test_build_dict"), "w") as f:
        for w in range(vocab):
            f.write("w%d %d\n" % (w, int(rng.randint(5, 100))))
    for i in range(files):
        with open(os.path.join(str(d), "train_data", "part-%d" % i), "w") as f:
            for _ in range(lines):
                topic = int(rng.randint(0, vocab // 10))
                f.write(" ".join(str(topic * 10 + int(rng.randint(0, 10))) for _ in range(8)) + "\n")
    return d


def write_digit_png(path, digit=3):
    """A 28x28 grey PNG (the dgc example's image/infer_3.png, left out of the copy) in
    write_mnist's pattern for class digit."""
    import numpy as np
    from PIL import Image
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    a = np.full(784, 50, np.uint8)
    a[digit * 78:(digit + 1) * 78] = 200
    Image.fromarray(a.reshape(28, 28)).save(str(path))


def write_deepfm(d, rows=2000, files=2, test_rows=600, values=12, seed=5):
    """deepFM's inputs (data/get_data.sh's layout): data/train_data/part-N and
    data/test_data/part-0 in Criteo's format (label, 13 integer and 26 categorical
    features, tab-separated) and feat_dict_10.pkl2, data/preprocess.py's dictionary (the
    13 integer columns as ids 1..13, then each categorical value seen at least 10 times).
    The labels come from one planted logistic model over the categorical values (each a
    weight) and the first integer column.  Returns num_feat (len(dict) + 1, as preprocess.py
    prints it)."""
    import pickle

    import numpy as np
    rng = np.random.RandomState(seed)
    weight = rng.normal(0, 1.0, size=(26, values))

    def lines(n):
        out = []
        for _ in range(n):
            cats = rng.randint(0, values, size=26)
            ints = rng.randint(0, 20, size=13)
            logit = weight[np.arange(26), cats].sum() / 2.0 + (ints[0] - 10) / 5.0
            label = int(rng.rand() < 1.0 / (1.0 + np.exp(-logit)))
            row = [str(label)] + [("" if rng.rand() < 0.05 else str(int(v))) for v in ints]
            row += ["%02x%06x" % (f, int(c)) for f, c in enumerate(cats)]
            out.append("\t".join(row) + "\n")
        return out

    for sub, n, k in (("train_data", rows, files), ("test_data", test_rows, 1)):
        os.makedirs(os.path.join(str(d), "data", sub), exist_ok=True)
        for i in range(k):
            with open(os.path.join(str(d), "data", sub, "part-%d" % i), "w") as f:
                f.writelines(lines(n))
    feat = {i: i for i in range(1, 14)}
    for f in range(26):
        for c in range(values):
            feat["%02x%06x" % (f, c)] = len(feat) + 1
    with open(os.path.join(str(d), "feat_dict_10.pkl2"), "wb") as fh:
        pickle.dump(feat, fh)
    return len(feat) + 1


def write_simnet(d, lines=1500, files=2, test_lines=300, topics=20, words=20, pos=5, neg=20, seed=9):
    """simnet_bow's inputs (get_data.sh's layout): train_data/part-N and test_data/part-0,
    lines of "label;P N;query;title_1;...;title_P+N;" (word ids separated by spaces; the P
    positive titles first).  The query and its positive titles draw words from one topic
    (words ids topic * words ...), the negative titles from other topics.  Returns the
    dictionary size (topics * words)."""
    import numpy as np
    rng = np.random.RandomState(seed)

    def ids(topic, n):
        return " ".join(str(topic * words + int(w)) for w in rng.randint(0, words, size=n))

    def line():
        t = int(rng.randint(0, topics))
        others = [int(o) for o in rng.randint(1, topics, size=neg)]
        titles = [ids(t, int(rng.randint(2, 6))) for _ in range(pos)]
        titles += [ids((t + o) % topics, int(rng.randint(2, 6))) for o in others]
        return "1;%d %d;%s;%s;\n" % (pos, neg, ids(t, int(rng.randint(2, 5))), ";".join(titles))

    for sub, n, k in (("train_data", lines, files), ("test_data", test_lines, 1)):
        os.makedirs(os.path.join(str(d), sub), exist_ok=True)
        for i in range(k):
            with open(os.path.join(str(d), sub, "part-%d" % i), "w") as f:
                f.writelines(line() for _ in range(n))
    return topics * words

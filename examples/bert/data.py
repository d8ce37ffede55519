"""Text-classification data for the BERT example.

Two sources:

* WordNet glosses -> lexicographer category (default).  Each synset line of a
  WordNet 3.0 ``data.<pos>`` file reads::

      <offset> <lex_filenum> <ss_type> <w_cnt> <word> <lex_id> ... | <gloss>

  The second field, a two-digit decimal, numbers the lexicographer file the
  synset came from (``06`` = ``noun.artifact``, ``18`` = ``noun.person``...,
  the table in lexnames(5WN)); the text after ``|`` is the gloss: a
  definition, often followed by quoted example sentences.  Lines that start
  with two spaces are the licence header.  The task: read the gloss, predict
  the category.  Debian's ``wordnet-base`` installs the files under
  ``/usr/share/wordnet``.

* CSV / TSV files with a header naming a text column (``sentence`` or
  ``text``; else the first column) and a ``label`` column (else the last
  column), e.g. GLUE SST-2's ``sentence<TAB>label``.  ``.tsv`` files (or
  files whose header has a tab) are read tab-separated without quoting, as
  GLUE writes them; others as ordinary CSV.

Both return a :class:`TextDataset`: parallel lists of texts and integer label
ids, plus the label names.
"""

import csv
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_WORDNET_DIR = "/usr/share/wordnet"
DEFAULT_TOP_LABELS = 6
DEFAULT_EVAL_SIZE = 2000
SPLIT_SEED = 0  # the train/eval split never depends on --seed

# lexnames(5WN): lexicographer file number -> name.
LEXNAMES = (
    "adj.all", "adj.pert", "adv.all", "noun.Tops", "noun.act", "noun.animal",
    "noun.artifact", "noun.attribute", "noun.body", "noun.cognition",
    "noun.communication", "noun.event", "noun.feeling", "noun.food",
    "noun.group", "noun.location", "noun.motive", "noun.object", "noun.person",
    "noun.phenomenon", "noun.plant", "noun.possession", "noun.process",
    "noun.quantity", "noun.relation", "noun.shape", "noun.state",
    "noun.substance", "noun.time", "verb.body", "verb.change",
    "verb.cognition", "verb.communication", "verb.competition",
    "verb.consumption", "verb.contact", "verb.creation", "verb.emotion",
    "verb.motion", "verb.perception", "verb.possession", "verb.social",
    "verb.stative", "verb.weather", "adj.ppl",
)
# lexname prefix -> data file suffix
_POS_FILES = {"noun": "noun", "verb": "verb", "adj": "adj", "adv": "adv"}


class DatasetError(ValueError):
    """A data file is missing or malformed; the message names the file."""


@dataclass
class TextDataset:
    texts: list = field(default_factory=list)
    labels: list = field(default_factory=list)  # ints in [0, len(label_names))
    label_names: list = field(default_factory=list)

    def __len__(self):
        return len(self.texts)

    def subset(self, indices):
        return TextDataset([self.texts[i] for i in indices],
                           [self.labels[i] for i in indices], self.label_names)

    def head(self, n):
        return self if n is None else self.subset(range(min(n, len(self))))


# ---------------------------------------------------------------- WordNet

def parse_wordnet_file(path):
    """Yield ``(gloss, lexname)`` for each synset line of a WordNet data file."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: file not found (apt-get install wordnet-base)")
    with path.open(encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if line.startswith("  ") or not line.strip():
                continue  # licence header / blank line
            head, bar, gloss = line.partition("|")
            fields = head.split()
            if not bar or len(fields) < 2 or not fields[1].isdigit():
                raise DatasetError(f"{path}:{lineno}: not a WordNet synset line")
            filenum = int(fields[1])
            if filenum >= len(LEXNAMES):
                raise DatasetError(f"{path}:{lineno}: lex_filenum {filenum} out of range")
            gloss = gloss.strip()
            if gloss:
                yield gloss, LEXNAMES[filenum]


def load_wordnet(directory=DEFAULT_WORDNET_DIR, labels=None, top=DEFAULT_TOP_LABELS):
    """Glosses of the chosen lexicographer categories.

    ``labels``: explicit lexnames (``["noun.person", "verb.motion"]``); the
    data files they need are read.  Otherwise the ``top`` most frequent noun
    categories of ``data.noun``.  Label ids follow the order of ``labels``
    (frequency order for ``top``, ties by name).  Synsets keep file order.
    """
    directory = Path(directory)
    if labels:
        unknown = [name for name in labels if name not in LEXNAMES]
        if unknown:
            raise DatasetError(f"unknown WordNet lexname(s): {', '.join(unknown)}")
        pos_list = sorted({_POS_FILES[name.split(".")[0]] for name in labels})
    else:
        pos_list = ["noun"]
    rows = []
    for pos in pos_list:
        rows += parse_wordnet_file(directory / f"data.{pos}")
    if not labels:
        counts = Counter(name for _, name in rows)
        labels = [name for name, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))][:top]
    index = {name: i for i, name in enumerate(labels)}
    data = TextDataset(label_names=list(labels))
    for gloss, name in rows:
        if name in index:
            data.texts.append(gloss)
            data.labels.append(index[name])
    if not data.texts:
        raise DatasetError(f"{directory}: no synsets for labels {', '.join(labels)}")
    return data


# ---------------------------------------------------------------- CSV / TSV

def read_table(path):
    """Return ``(texts, raw_labels)`` from a CSV/TSV file with a header row."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    with path.open(encoding="utf-8", newline="") as f:
        header_line = f.readline()
        tab = path.suffix.lower() == ".tsv" or "\t" in header_line
        f.seek(0)
        reader = (csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE) if tab
                  else csv.reader(f))
        try:
            header = [h.strip().lower() for h in next(reader)]
        except StopIteration:
            raise DatasetError(f"{path}: empty file") from None
        if len(header) < 2:
            raise DatasetError(f"{path}: need a header with a text and a label column")
        text_col = next((header.index(n) for n in ("sentence", "text") if n in header), 0)
        label_col = header.index("label") if "label" in header else len(header) - 1
        texts, labels = [], []
        for lineno, row in enumerate(reader, 2):
            if not row or not any(cell.strip() for cell in row):
                continue
            if len(row) <= max(text_col, label_col):
                raise DatasetError(f"{path}:{lineno}: expected {len(header)} columns, got {len(row)}")
            texts.append(row[text_col])
            labels.append(row[label_col].strip())
    if not texts:
        raise DatasetError(f"{path}: no rows")
    return texts, labels


def label_vocabulary(raw_labels):
    """Label names from raw label strings: integers sort numerically
    (``0..max`` for GLUE-style ids), anything else alphabetically."""
    unique = set(raw_labels)
    if all(s.lstrip("-").isdigit() for s in unique):
        return [str(v) for v in sorted(int(s) for s in unique)]
    return sorted(unique)


def load_tables(train_file, eval_file=None):
    """Read the train (and eval) files with one shared label vocabulary."""
    train_texts, train_raw = read_table(train_file)
    eval_texts, eval_raw = read_table(eval_file) if eval_file else ([], [])
    names = label_vocabulary(train_raw + eval_raw)
    index = {name: i for i, name in enumerate(names)}

    numeric = all(s.lstrip("-").isdigit() for s in train_raw + eval_raw)

    def ids(raw):  # "01" and "1" are the same integer label
        return [index[str(int(s)) if numeric else s] for s in raw]

    train = TextDataset(train_texts, ids(train_raw), names)
    evaluation = TextDataset(eval_texts, ids(eval_raw), names) if eval_file else None
    return train, evaluation


# ---------------------------------------------------------------- splits

def split(data, eval_size=DEFAULT_EVAL_SIZE, seed=SPLIT_SEED):
    """Shuffle once with a fixed seed; the first ``eval_size`` items are the
    eval split, the rest the train split."""
    if len(data) <= eval_size:
        raise DatasetError(f"{len(data)} examples: too few for an eval split of {eval_size}")
    order = list(range(len(data)))
    random.Random(seed).shuffle(order)
    return data.subset(order[eval_size:]), data.subset(order[:eval_size])


def majority_baseline(train, evaluation):
    """Accuracy on ``evaluation`` of always predicting the train set's most
    frequent label (ties: the lowest id)."""
    if not evaluation.labels:
        return 0.0
    counts = Counter(train.labels)
    majority = min(counts, key=lambda k: (-counts[k], k))
    return sum(y == majority for y in evaluation.labels) / len(evaluation.labels)

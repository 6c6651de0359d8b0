"""ELMo inside other NLP libraries: `spacy` (the ``elmo`` pipeline component; its library, an optional extra of the
package, is imported only when used) and `flair_elmo` (Flair's `ElmoEmbeddings`: a standalone file for Flair's own
environment, which needs transformers < 5; it imports nothing of this package)."""

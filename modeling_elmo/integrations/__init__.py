"""ELMo inside other NLP libraries: `spacy` (the ``elmo`` pipeline component) and `flair` (Flair's
`ElmoEmbeddings`). Each imports its library, an optional install beside the package, only when it is imported."""

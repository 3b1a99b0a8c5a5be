"""The store's files, read as the broker reads them: mapped-file queues, the ConsumeQueue and its
ext file, the CommitLog and its decoded columns, the IndexFile, the config files
(docs/formats.md, docs/config-and-index.md). Every reader maps its files read-only."""

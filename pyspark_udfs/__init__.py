"""rmqfilter on Spark: SQL functions, Arrow UDFs, the ``rocketmq`` data source and the CLI."""

package rmqfilter.harness;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import com.alibaba.fastjson.serializer.SerializerFeature;
import java.io.BufferedReader;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintStream;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.client.consumer.AckCallback;
import org.apache.rocketmq.client.consumer.AckResult;
import org.apache.rocketmq.client.consumer.AckStatus;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.PopCallback;
import org.apache.rocketmq.client.consumer.PopResult;
import org.apache.rocketmq.client.consumer.PopStatus;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.store.ReadOffsetType;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.impl.consumer.ProcessQueue;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.constant.ConsumeInitMode;
import org.apache.rocketmq.common.constant.PermName;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.filter.ExpressionType;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.namesrv.NamesrvController;
import org.apache.rocketmq.remoting.exception.RemotingException;
import org.apache.rocketmq.remoting.protocol.admin.ConsumeStats;
import org.apache.rocketmq.remoting.protocol.admin.OffsetWrapper;
import org.apache.rocketmq.remoting.protocol.admin.TopicOffset;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.apache.rocketmq.remoting.protocol.header.AckMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.ExtraInfoUtil;
import org.apache.rocketmq.remoting.protocol.header.PopMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The scenario's clients in one JVM, driven by run.py: one JSON command per line on stdin, one
 * JSON answer per line on stdout ({@code {"ok": true, ...}} or {@code {"ok": false, "error": ...}}).
 * Producers, push consumers and the admin API are RocketMQ's own client classes; what they sent
 * and received is appended to the JSON-lines files the commands name.
 *
 * <p>The same JVM hosts the scenario's NameServer and, unless the scenario kills them, its brokers
 * ({@code namesrv_start}, {@code broker_start}, {@code broker_stop}): each is RocketMQ's own
 * controller, started and shut down as in its own JVM, but one JVM start and warm-up serves them
 * all (docs/testing.md#processes). Quitting, or SIGTERM, shuts down the brokers still running,
 * then the NameServer, as their own shutdown hooks would.
 */
public final class Client {
    /**
     * Every request's timeout: CI's two cores run the suite's two passes, Spark and several
     * scenarios' brokers at once, and a NameServer or broker there can take seconds to answer.
     */
    private static final int TIMEOUT_MS = 30000;
    private final PrintStream out;
    private String namesrv;
    private DefaultMQProducer producer;
    private TransactionMQProducer txProducer;
    /** Message trace on every producer and consumer made after {@code init} (its {@code trace}). */
    private boolean trace;
    private final Map<String, AtomicLong> txChecks = new ConcurrentHashMap<>();
    private DefaultMQAdminExt admin;
    private final Map<String, DefaultMQPushConsumer> consumers = new ConcurrentHashMap<>();
    private final Map<String, DefaultMQPullConsumer> pullConsumers = new ConcurrentHashMap<>();
    private final Map<String, Writer> files = new HashMap<>();
    private final Map<String, AtomicLong> receivedCount = new ConcurrentHashMap<>();
    private final List<Thread> loops = new ArrayList<>();
    private final AtomicBoolean loopRunning = new AtomicBoolean();
    private final AtomicLong loopSent = new AtomicLong();
    private final AtomicLong loopFailed = new AtomicLong();
    private final Map<String, BrokerController> brokers = new LinkedHashMap<>();
    private NamesrvController namesrvController;

    private Client(PrintStream out) {
        this.out = out;
    }

    public static void main(String[] args) throws Exception {
        // Answers go to the real stdout; the clients' own chatter goes to stderr.
        PrintStream answers = Stdout.claim();
        Client client = new Client(answers);
        Runtime.getRuntime().addShutdownHook(new Thread(client::stopServers, "harness-servers-shutdown"));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            JSONObject cmd = JSON.parseObject(line);
            JSONObject answer;
            try {
                answer = client.run(cmd);
                answer.put("ok", true);
            } catch (Throwable e) {
                e.printStackTrace();
                answer = new JSONObject();
                answer.put("ok", false);
                answer.put("error", e.toString());
            }
            answers.println(answer.toJSONString());
            if ("halt".equals(cmd.getString("cmd"))) {
                answers.flush();
                Runtime.getRuntime().halt(0);   // no shutdown hook: the brokers' stores are discarded
            }
            if ("quit".equals(cmd.getString("cmd"))) {
                break;
            }
        }
        System.exit(0);
    }

    private JSONObject run(JSONObject cmd) throws Exception {
        JSONObject answer = new JSONObject();
        switch (cmd.getString("cmd")) {
            case "namesrv_start" -> {
                if (namesrvController != null) {
                    throw new IllegalStateException("this JVM already runs a NameServer");
                }
                namesrvController = Namesrv.start(cmd.getIntValue("port"), cmd.getString("home"));
            }
            case "controller_start" -> Controller.start(cmd.getIntValue("port"), cmd.getIntValue("raft_port"),
                cmd.getString("home"));
            case "broker_start" -> {
                BrokerController controller = Broker.start(cmd.getString("properties"));
                String name = controller.getBrokerConfig().getBrokerName();
                synchronized (brokers) {
                    brokers.put(name, controller);
                }
                answer.put("broker", name);
                answer.put("addr", controller.getBrokerAddr());
            }
            case "broker_stop" -> {
                BrokerController controller;
                synchronized (brokers) {
                    controller = brokers.remove(cmd.getString("name"));
                }
                if (controller == null) {
                    throw new IllegalArgumentException("no broker " + cmd.getString("name") + " runs in this JVM");
                }
                controller.shutdown();
            }
            case "init" -> {
                namesrv = cmd.getString("namesrv");
                admin = new DefaultMQAdminExt(TIMEOUT_MS);
                admin.setNamesrvAddr(namesrv);
                admin.setInstanceName("harness-admin");
                admin.start();
                trace = cmd.getBooleanValue("trace");
                if (trace) {    // DefaultRecallMessageTraceHook writes Recall records only with this property
                    System.setProperty("com.rocketmq.recall.default.trace.enable", "true");
                }
                producer = new DefaultMQProducer("harness_producer");
                producer.setEnableTrace(trace);
                producer.setNamesrvAddr(namesrv);
                producer.setInstanceName("harness-producer");
                producer.setPollNameServerInterval(1000);
                producer.setSendMsgTimeout(TIMEOUT_MS);
                producer.start();
            }
            case "wait_brokers" -> waitBrokers(cmd.getJSONArray("names"));
            case "create_topic" -> createTopic(cmd);
            case "send" -> {
                Writer w = file(cmd.getString("out"));
                int n = 0;
                for (Object o : cmd.getJSONArray("messages")) {
                    JSONObject m = (JSONObject) o;
                    Message msg = message(m);
                    SendResult r = producer.send(msg);
                    write(w, sentLine(m, msg, r, "sent"));
                    n++;
                }
                answer.put("sent", n);
            }
            case "batch_send" -> answer.put("sent", batchSend(cmd));
            case "lmq_pull" -> answer.put("received", lmqPull(cmd));
            case "lmq_progress" -> answer.put("progress", lmqProgress(cmd));
            case "pull_fail" -> answer.put("received", pullFail(cmd));
            case "tx_send" -> answer.put("sent", txSend(cmd));
            case "tx_checks" -> {
                JSONObject checks = new JSONObject(true);
                txChecks.forEach((k, v) -> checks.put(k, v.get()));
                answer.put("checks", checks);
            }
            // consumeEnable=false in the group's subscriptionGroup entry: the broker answers its
            // pulls with NO_PERMISSION.
            case "disable_group" -> {
                SubscriptionGroupConfig config = new SubscriptionGroupConfig();
                config.setGroupName(cmd.getString("group"));
                config.setConsumeEnable(false);
                for (Object addr : cmd.getJSONArray("brokers")) {
                    patiently(() -> {
                        admin.createAndUpdateSubscriptionGroupConfig((String) addr, config);
                        return null;
                    });
                }
            }
            case "broker_permission" -> brokerPermission(cmd);
            case "send_loop_start" -> startLoop(cmd);
            case "bulk_send" -> answer.put("sent", bulkSend(cmd));
            case "send_loop_stop" -> {
                loopRunning.set(false);
                for (Thread loop : loops) {
                    loop.join();
                }
                answer.put("sent", loopSent.get());
                answer.put("failed", loopFailed.get());
            }
            case "send_loop_count" -> {
                answer.put("sent", loopSent.get());
                answer.put("failed", loopFailed.get());
            }
            case "consumer_start" -> startConsumer(cmd);
            case "consumer_wait_drained" -> answer.put("waited_ms", waitDrained(cmd));
            case "consumer_stop" -> stopConsumers(cmd.containsKey("groups")
                ? cmd.getJSONArray("groups").toJavaList(String.class) : List.of(cmd.getString("group")));
            case "received" -> answer.put("count", receivedCount.getOrDefault(cmd.getString("group"),
                new AtomicLong()).get());
            case "progress" -> answer.put("progress", progress(cmd.getString("group")));
            case "topic_stats" -> answer.put("queues", topicStats(cmd.getString("topic")));
            // The broker's own housekeeping on demand: delete the CommitLog files older than its
            // fileReservedTime, as at its deleteWhen hour (its clean-up service then deletes the
            // ConsumeQueue files that point only below the new CommitLog minimum).
            case "delete_expired_commitlog" -> answer.put("deleted",
                admin.deleteExpiredCommitLogByAddr(cmd.getString("addr")));
            case "pop" -> answer.put("popped", pop(cmd));
            case "recall" -> answer.put("recalls", recall(cmd));
            case "max_offset" -> answer.put("max_offset", producer.getDefaultMQProducerImpl().getMqClientFactory()
                .getMQClientAPIImpl().getMaxOffset(cmd.getString("addr"), new MessageQueue(cmd.getString("topic"),
                    cmd.getString("broker"), cmd.getIntValue("queue_id")), TIMEOUT_MS));
            case "quit" -> shutdown();
            case "halt" -> closeFiles();
            default -> throw new IllegalArgumentException("unknown command " + cmd.getString("cmd"));
        }
        return answer;
    }

    /** Until the NameServer lists every named broker (a topic created before that has no route). */
    private void waitBrokers(JSONArray names) throws Exception {
        long deadline = System.currentTimeMillis() + 4 * TIMEOUT_MS;
        while (!patiently(admin::examineBrokerClusterInfo).getBrokerAddrTable().keySet()
                .containsAll(names.toJavaList(String.class))) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("brokers " + names + " never registered with the NameServer");
            }
            Thread.sleep(200);
        }
    }

    /** Creates the topic on every broker, again until the NameServer has its route. */
    private void createTopic(JSONObject cmd) throws Exception {
        String topic = cmd.getString("topic");
        int queues = cmd.getIntValue("queues");
        long deadline = System.currentTimeMillis() + 4 * TIMEOUT_MS;
        while (true) {
            for (Object addr : cmd.getJSONArray("brokers")) {
                TopicConfig config = new TopicConfig(topic, queues, queues);
                JSONObject attributes = cmd.getJSONObject("attributes");
                if (attributes != null) {   // e.g. +queue.type=BatchCQ
                    Map<String, String> attrs = new HashMap<>();
                    attributes.forEach((k, v) -> attrs.put(k, String.valueOf(v)));
                    config.setAttributes(attrs);
                }
                patiently(() -> {
                    admin.createAndUpdateTopicConfig((String) addr, config);
                    return null;
                });
            }
            for (int i = 0; i < 15; i++) {
                try {
                    if (!admin.examineTopicRouteInfo(topic).getQueueDatas().isEmpty()) {
                        return;
                    }
                } catch (Exception e) {
                    if (System.currentTimeMillis() > deadline) {
                        throw e;
                    }
                }
                Thread.sleep(200);
            }
        }
    }

    /**
     * An idempotent request again, for up to four timeouts, when it fails in the transport (a
     * NameServer or broker too loaded to answer in time, or not listening yet); any other error
     * is the request's answer.
     */
    private static <T> T patiently(Callable<T> request) throws Exception {
        long deadline = System.currentTimeMillis() + 4 * TIMEOUT_MS;
        while (true) {
            try {
                return request.call();
            } catch (RemotingException e) {
                if (System.currentTimeMillis() > deadline) {
                    throw e;
                }
                Thread.sleep(500);
            }
        }
    }

    private static Message message(JSONObject m) {
        Message msg = new Message();
        msg.setTopic(m.getString("topic"));
        String tags = m.getString("tags");
        if (tags != null) {
            msg.setTags(tags);
        }
        JSONArray keys = m.getJSONArray("keys");
        if (keys != null && !keys.isEmpty()) {
            List<String> ks = new ArrayList<>();
            for (Object k : keys) {
                ks.add((String) k);
            }
            msg.setKeys(ks);
        }
        JSONObject props = m.getJSONObject("properties");
        if (props != null) {
            for (Map.Entry<String, Object> e : props.entrySet()) {
                msg.putUserProperty(e.getKey(), String.valueOf(e.getValue()));
            }
        }
        // LMQ multi-dispatch: the broker (enableLmq, enableMultiDispatch) adds a unit to each named
        // %LMQ% queue; INNER_MULTI_DISPATCH is a reserved property, so it is set past putUserProperty.
        JSONArray lmq = m.getJSONArray("lmq");
        if (lmq != null && !lmq.isEmpty()) {
            MessageAccessor.putProperty(msg, MessageConst.PROPERTY_INNER_MULTI_DISPATCH,
                String.join(MixAll.LMQ_DISPATCH_SEPARATOR, lmq.toJavaList(String.class)));
        }
        // 5.4+ priority (RIP-80) and 5.5+ Lite topic (RIP-83) messages: reserved properties from
        // those releases on, set past putUserProperty; named here, not by MessageConst, so that the
        // source compiles against 5.3.3 too (docs/formats.md#releases-after-533).
        if (m.containsKey("priority")) {
            MessageAccessor.putProperty(msg, "_SYS_MSG_PRIORITY_", String.valueOf(m.getIntValue("priority")));
        }
        if (m.containsKey("lite_topic")) {
            MessageAccessor.putProperty(msg, "__LITE_TOPIC", m.getString("lite_topic"));
        }
        if (m.containsKey("delay_level")) {
            msg.setDelayTimeLevel(m.getIntValue("delay_level"));
        }
        // A 5.x timer message: delivered timer_delay_ms after it is sent (TIMER_DELIVER_MS).
        if (m.containsKey("timer_delay_ms")) {
            msg.setDeliverTimeMs(System.currentTimeMillis() + m.getLongValue("timer_delay_ms"));
        }
        String body = m.getString("body");
        msg.setBody((body == null ? "" : body).getBytes(StandardCharsets.UTF_8));
        return msg;
    }

    private static Map<String, Object> sentLine(JSONObject m, Message msg, SendResult r, String outcome) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("uniq_key", r != null ? r.getMsgId() : MessageClientIDSetter.getUniqID(msg));
        line.put("topic", msg.getTopic());
        line.put("tags", msg.getTags());
        line.put("keys", m.getJSONArray("keys"));
        line.put("properties", m.getJSONObject("properties"));
        if (m.containsKey("lmq")) {
            line.put("lmq", m.getJSONArray("lmq"));
        }
        if (m.containsKey("delay_level")) {
            line.put("delay_level", m.getIntValue("delay_level"));
        }
        if (m.containsKey("timer_delay_ms")) {
            line.put("timer_delay_ms", m.getLongValue("timer_delay_ms"));
            line.put("deliver_ms", Long.parseLong(msg.getProperty("TIMER_DELIVER_MS")));
        }
        line.put("outcome", outcome);
        line.put("sent_ms", System.currentTimeMillis());
        if (r != null) {
            line.put("send_status", r.getSendStatus().name());
            line.put("broker", r.getMessageQueue().getBrokerName());
            line.put("queue_id", r.getMessageQueue().getQueueId());
            line.put("queue_offset", r.getQueueOffset());
            line.put("msg_id", r.getOffsetMsgId());
            if (r.getRecallHandle() != null) {
                line.put("recall_handle", r.getRecallHandle());
            }
        }
        return line;
    }

    /**
     * Timer recalls (5.x, the broker's recallMessageEnable): {@code handles} are the recall handles
     * of timer messages' send results. Each answer row says whether the broker took the recall
     * ({@code ok}, the marker's message id) or rejected it ({@code error}); a rejection is an
     * answer, not a failed command, so a scenario can ask for recalls the broker must refuse.
     */
    private List<Map<String, Object>> recall(JSONObject cmd) {
        List<Map<String, Object>> out = new ArrayList<>();
        String topic = cmd.getString("topic");
        for (Object h : cmd.getJSONArray("handles")) {
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("recall_handle", h);
            row.put("recall_ms", System.currentTimeMillis());
            try {
                row.put("marker_msg_id", producer.recallMessage(topic, (String) h));
                row.put("ok", true);
            } catch (Exception e) {
                row.put("ok", false);
                row.put("error", e.toString());
            }
            out.add(row);
        }
        return out;
    }

    /**
     * Shuts the push consumers of {@code groups} down at once: each is a client instance of its own
     * (instance name group-phase), and a consumer's shutdown (offsets persisted, the client
     * unregistered) takes about a second, so a scenario's many groups stop in about one.
     */
    private void stopConsumers(List<String> groups) throws InterruptedException {
        List<DefaultMQPushConsumer> stopping = new ArrayList<>();
        for (String group : groups) {
            DefaultMQPushConsumer c = consumers.remove(group);
            if (c == null) {
                throw new IllegalArgumentException("no consumer of group " + group + " runs");
            }
            stopping.add(c);
        }
        List<Thread> threads = new ArrayList<>();
        for (DefaultMQPushConsumer c : stopping) {
            Thread t = new Thread(c::shutdown, "harness-stop-" + c.getConsumerGroup());
            t.start();
            threads.add(t);
        }
        for (Thread t : threads) {
            t.join();
        }
    }

    /**
     * Transactional sends: each message's {@code tx} field is the producer's local decision
     * ({@code commit}, {@code rollback}, or {@code unknown}: UNKNOW, and UNKNOW again on every
     * check the broker makes, so its half stays unresolved). The sent line records the decision.
     */
    private int txSend(JSONObject cmd) throws Exception {
        if (txProducer == null) {
            txProducer = new TransactionMQProducer("harness_tx_producer");
            txProducer.setEnableTrace(trace);
            txProducer.setNamesrvAddr(namesrv);
            txProducer.setInstanceName("harness-tx-producer");
            txProducer.setPollNameServerInterval(1000);
            txProducer.setSendMsgTimeout(TIMEOUT_MS);
            txProducer.setTransactionListener(new TransactionListener() {
                @Override
                public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                    return switch ((String) arg) {
                        case "commit" -> LocalTransactionState.COMMIT_MESSAGE;
                        case "rollback" -> LocalTransactionState.ROLLBACK_MESSAGE;
                        default -> LocalTransactionState.UNKNOW;
                    };
                }

                @Override
                public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                    txChecks.computeIfAbsent(MessageClientIDSetter.getUniqID(msg), k -> new AtomicLong())
                        .incrementAndGet();
                    return LocalTransactionState.UNKNOW;
                }
            });
            txProducer.start();
        }
        Writer w = file(cmd.getString("out"));
        int n = 0;
        for (Object o : cmd.getJSONArray("messages")) {
            JSONObject m = (JSONObject) o;
            Message msg = message(m);
            SendResult r = txProducer.sendMessageInTransaction(msg, m.getString("tx"));
            Map<String, Object> line = sentLine(m, msg, r, "sent");
            line.put("tx", m.getString("tx"));
            line.put("tx_state", ((org.apache.rocketmq.client.producer.TransactionSendResult) r)
                .getLocalTransactionState().name());
            write(w, line);
            n++;
        }
        return n;
    }

    /**
     * Sends numbered messages to one topic from {@code threads} threads until told to stop; a
     * failed send is recorded (outcome {@code failed}), not fatal.
     */
    private void startLoop(JSONObject cmd) throws Exception {
        Writer w = file(cmd.getString("out"));
        String topic = cmd.getString("topic");
        String prefix = cmd.getString("prefix");
        JSONArray tagCycle = cmd.getJSONArray("tags");
        int pauseMs = cmd.getIntValue("pause_ms");
        int threads = Math.max(1, cmd.getIntValue("threads"));
        AtomicLong next = new AtomicLong();
        loopRunning.set(true);
        loops.clear();
        for (int t = 0; t < threads; t++) {
            Thread loop = new Thread(() -> {
                while (loopRunning.get()) {
                    long i = next.getAndIncrement();
                    JSONObject m = new JSONObject(true);
                    m.put("topic", topic);
                    m.put("tags", tagCycle.getString((int) (i % tagCycle.size())));
                    JSONArray keys = new JSONArray();
                    keys.add(prefix + "-" + i);
                    m.put("keys", keys);
                    JSONObject props = new JSONObject(true);
                    props.put("seq", i);
                    props.put("mod", i % 7);
                    m.put("properties", props);
                    m.put("body", "loop message " + i);
                    Message msg = message(m);
                    try {
                        SendResult r = producer.send(msg);
                        write(w, sentLine(m, msg, r, "sent"));
                        loopSent.incrementAndGet();
                    } catch (Exception e) {
                        Map<String, Object> line = sentLine(m, msg, null, "failed");
                        line.put("error", e.getClass().getSimpleName());
                        write(w, line);
                        loopFailed.incrementAndGet();
                        sleep(100);
                    }
                    if (pauseMs > 0) {
                        sleep(pauseMs);
                    }
                }
            }, "send-loop-" + t);
            loops.add(loop);
            loop.start();
        }
    }

    /**
     * {@code count} messages to one topic as fast as batches go (not recorded line by line):
     * properties {@code a} (0..999) and {@code region} (eu, us, cn), tags TagA/TagB, key bulk-i.
     */
    private long bulkSend(JSONObject cmd) throws Exception {
        String topic = cmd.getString("topic");
        long count = cmd.getLongValue("count");
        int batch = 128;
        String[] regions = {"eu", "us", "cn"};
        java.util.Random rng = new java.util.Random(25);
        long sent = 0;
        while (sent < count) {
            List<Message> msgs = new ArrayList<>();
            for (int i = 0; i < batch && sent + i < count; i++) {
                long n = sent + i;
                Message m = new Message(topic, n % 2 == 0 ? "TagA" : "TagB", "bulk-" + n,
                    ("throughput message " + n).getBytes(StandardCharsets.UTF_8));
                m.putUserProperty("a", Integer.toString(rng.nextInt(1000)));
                m.putUserProperty("region", regions[rng.nextInt(regions.length)]);
                msgs.add(m);
            }
            producer.send(msgs);
            sent += msgs.size();
        }
        return sent;
    }

    private void startConsumer(JSONObject cmd) throws Exception {
        String group = cmd.getString("group");
        String topic = cmd.getString("topic");
        String type = cmd.getString("type");
        String expression = cmd.getString("expression");
        String phase = cmd.getString("phase");
        Writer w = file(cmd.getString("out"));
        AtomicLong count = receivedCount.computeIfAbsent(group, g -> new AtomicLong());
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setEnableTrace(trace);
        c.setNamesrvAddr(namesrv);
        c.setInstanceName(group + "-" + phase);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.setPersistConsumerOffsetInterval(1000);
        c.setPollNameServerInterval(1000);
        c.setHeartbeatBrokerInterval(1000);
        if (cmd.containsKey("pull_batch_size")) {
            c.setPullBatchSize(cmd.getIntValue("pull_batch_size"));
            c.setConsumeMessageBatchMaxSize(cmd.getIntValue("consume_batch_size"));
            c.setConsumeThreadMin(cmd.getIntValue("consume_threads"));
            c.setConsumeThreadMax(cmd.getIntValue("consume_threads"));
            c.setPullThresholdForQueue(cmd.getIntValue("pull_threshold"));
        }
        c.subscribe(topic, "SQL92".equals(type) ? MessageSelector.bySql(expression) : MessageSelector.byTag(expression));
        boolean record = !cmd.getBooleanValue("count_only");
        // A consumer that fails (RECONSUME_LATER) every message whose user property
        // fail_property is "true": the client sends it back, the broker retries it through the
        // group's retry topic and, after max_reconsume_times, writes it to the group's DLQ.
        String failProperty = cmd.getString("fail_property");
        if (cmd.containsKey("max_reconsume_times")) {
            c.setMaxReconsumeTimes(cmd.getIntValue("max_reconsume_times"));
        }
        if (failProperty != null) {
            c.setConsumeMessageBatchMaxSize(1);
        }
        c.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            boolean fail = failProperty != null
                && msgs.stream().anyMatch(m -> "true".equals(m.getUserProperty(failProperty)));
            if (record) {
                for (MessageExt msg : msgs) {
                    Map<String, Object> line = receivedLine(group, msg.getTopic(), msg.getQueueId(),
                        msg.getQueueOffset(), msg, msg.getBrokerName(), phase);
                    if (failProperty != null) {
                        line.put("result", fail ? "failed" : "consumed");
                    }
                    if (trace) {    // the trace's SubBefore is stamped just before the listener runs
                        line.put("received_ms", System.currentTimeMillis());
                    }
                    write(w, line);
                }
            }
            count.addAndGet(msgs.size());
            return fail ? ConsumeConcurrentlyStatus.RECONSUME_LATER : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        try {
            c.start();
        } catch (MQClientException e) {
            // start() asks the broker to check a SQL92 subscription with a 3 s timeout; a broker slow
            // to answer (a loaded machine) fails it, and the consumer runs on without its first
            // heartbeat. Shut it down and start it again, a few times, rather than leave it half started.
            int attempt = cmd.getIntValue("start_attempt");
            c.shutdown();
            if (attempt >= 4 || e.getMessage() == null || !e.getMessage().contains("Check client in broker")) {
                throw e;
            }
            Thread.sleep(1000L << attempt);
            cmd.put("start_attempt", attempt + 1);
            startConsumer(cmd);
            return;
        }
        consumers.put(group, c);
    }

    /**
     * A POP consumer driven by hand (the broker's POP_MESSAGE and ACK_MESSAGE / BATCH_ACK_MESSAGE
     * requests through the client's own MQClientAPIImpl): pops from every queue of the topic,
     * {@code max_nums} at a time with {@code invisible_ms}, until {@code until_count} messages (or,
     * with {@code until_empty}, until a pop finds nothing); then acks every popped message except
     * every {@code unacked_every}-th (0: acks none), one pop's acks in one batch ack every other pop.
     * Each popped message is a received line with {@code consumer} "pop", the queue it came from
     * (the POP retry topic for a revived copy), its pop time, invisible time and {@code result}
     * ({@code acked} or {@code unacked}).
     */
    private int pop(JSONObject cmd) throws Exception {
        String group = cmd.getString("group");
        String topic = cmd.getString("topic");
        String addr = cmd.getString("addr");
        String brokerName = cmd.getString("broker");
        long invisibleMs = cmd.getLongValue("invisible_ms");
        int unackedEvery = cmd.getIntValue("unacked_every");
        int untilCount = cmd.getIntValue("until_count");
        boolean untilEmpty = cmd.getBooleanValue("until_empty");
        Writer w = file(cmd.getString("out"));
        MQClientAPIImpl api = producer.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl();
        long deadline = System.currentTimeMillis() + 4 * TIMEOUT_MS;
        int popped = 0;
        int pops = 0;
        while (System.currentTimeMillis() < deadline && (untilEmpty || popped < untilCount)) {
            PopMessageRequestHeader h = new PopMessageRequestHeader();
            h.setConsumerGroup(group);
            h.setTopic(topic);
            h.setQueueId(-1);
            h.setMaxMsgNums(untilEmpty ? cmd.getIntValue("max_nums") : Math.min(cmd.getIntValue("max_nums"),
                untilCount - popped));
            h.setInvisibleTime(invisibleMs);
            h.setPollTime(500);
            h.setBornTime(System.currentTimeMillis());
            h.setInitMode(ConsumeInitMode.MIN);
            h.setExpType(ExpressionType.TAG);
            h.setExp("*");
            CompletableFuture<PopResult> f = new CompletableFuture<>();
            api.popMessageAsync(brokerName, addr, h, TIMEOUT_MS, new PopCallback() {
                @Override
                public void onSuccess(PopResult r) {
                    f.complete(r);
                }

                @Override
                public void onException(Throwable e) {
                    f.completeExceptionally(e);
                }
            });
            // the request's own timeout ends it (onException); waiting less failed a pop the broker was
            // still answering on a loaded machine (seed 17798 on 5.5.1)
            PopResult r = f.get(TIMEOUT_MS + 5_000L, TimeUnit.MILLISECONDS);
            if (r.getPopStatus() != PopStatus.FOUND || r.getMsgFoundList() == null || r.getMsgFoundList().isEmpty()) {
                if (untilEmpty) {
                    break;
                }
                continue;
            }
            List<String> batch = new ArrayList<>();
            for (MessageExt msg : r.getMsgFoundList()) {
                String extraInfo = msg.getProperty(MessageConst.PROPERTY_POP_CK);
                String[] info = ExtraInfoUtil.split(extraInfo);
                String realTopic = ExtraInfoUtil.getRealTopic(info, topic, group);
                boolean ack = unackedEvery > 0 && (popped + 1) % unackedEvery != 0;
                popped++;
                Map<String, Object> line = receivedLine(group, realTopic, ExtraInfoUtil.getQueueId(info),
                    ExtraInfoUtil.getQueueOffset(info), msg, brokerName, cmd.getString("phase"));
                line.put("consumer", "pop");
                line.put("pop_time", r.getPopTime());
                line.put("invisible_ms", r.getInvisibleTime());
                line.put("ck_offset", ExtraInfoUtil.getCkQueueOffset(info));
                line.put("result", ack ? "acked" : "unacked");
                if (ack && pops % 2 == 1) {
                    batch.add(extraInfo);
                } else if (ack) {
                    AckMessageRequestHeader a = new AckMessageRequestHeader();
                    a.setConsumerGroup(group);
                    a.setTopic(realTopic);
                    a.setQueueId(ExtraInfoUtil.getQueueId(info));
                    a.setOffset(ExtraInfoUtil.getQueueOffset(info));
                    a.setExtraInfo(extraInfo);
                    CompletableFuture<AckResult> done = new CompletableFuture<>();
                    api.ackMessageAsync(addr, TIMEOUT_MS, ackCallback(done), a);
                    checkAck(done, line);
                }
                line.put("ack", ack ? (pops % 2 == 1 ? "batch" : "single") : null);
                write(w, line);
            }
            if (!batch.isEmpty()) {
                CompletableFuture<AckResult> done = new CompletableFuture<>();
                api.batchAckMessageAsync(addr, TIMEOUT_MS, ackCallback(done), topic, group, batch);
                checkAck(done, batch);
            }
            pops++;
        }
        if (!untilEmpty && popped < untilCount) {
            throw new IllegalStateException("popped " + popped + " of " + untilCount + " messages of " + topic);
        }
        return popped;
    }

    /**
     * A received line's fields every consumer writes: the group, where the message was taken from
     * (topic, queue, queue offset), which message it is (UNIQ_KEY, offset message id, reconsume
     * times, tags, keys), the broker and the scenario's phase. Each consumer adds its own fields.
     */
    private static Map<String, Object> receivedLine(String group, String topic, int queueId, long queueOffset,
                                                    MessageExt msg, String broker, String phase) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("group", group);
        line.put("topic", topic);
        line.put("queue_id", queueId);
        line.put("queue_offset", queueOffset);
        line.put("uniq_key", MessageClientIDSetter.getUniqID(msg));
        line.put("msg_id", msg instanceof MessageClientExt ? ((MessageClientExt) msg).getOffsetMsgId()
            : msg.getMsgId());
        line.put("reconsume_times", msg.getReconsumeTimes());
        line.put("broker", broker);
        line.put("phase", phase);
        line.put("tags", msg.getTags());
        line.put("keys", msg.getKeys());
        return line;
    }

    private static AckCallback ackCallback(CompletableFuture<AckResult> done) {
        return new AckCallback() {
            @Override
            public void onSuccess(AckResult r) {
                done.complete(r);
            }

            @Override
            public void onException(Throwable e) {
                done.completeExceptionally(e);
            }
        };
    }

    private static void checkAck(CompletableFuture<AckResult> done, Object what) throws Exception {
        AckResult r = done.get(TIMEOUT_MS + 5_000L, TimeUnit.MILLISECONDS);
        if (r.getStatus() != AckStatus.OK) {
            throw new IllegalStateException("the broker did not take the ack of " + what + ": " + r);
        }
    }

    /**
     * Waits until each named consumer has every queue of its topic assigned, nothing in flight,
     * and its offset at the queue's max offset (the broker's filter moves the offset past the
     * units it skips), then until those offsets are committed to the broker.
     */
    private long waitDrained(JSONObject cmd) throws Exception {
        long start = System.currentTimeMillis();
        long deadline = start + cmd.getLongValue("timeout_ms");
        for (Object o : cmd.getJSONArray("groups")) {
            String group = (String) o;
            DefaultMQPushConsumer c = consumers.get(group);
            String topic = c.getDefaultMQPushConsumerImpl().getSubscriptionInner().keySet().stream()
                .filter(t -> !t.startsWith("%RETRY%")).findFirst().orElseThrow();
            while (!drained(c, group, topic)) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("group " + group + " not drained in time");
                }
                Thread.sleep(200);
            }
        }
        return System.currentTimeMillis() - start;
    }

    private boolean drained(DefaultMQPushConsumer c, String group, String topic) throws Exception {
        Collection<MessageQueue> mqs;
        try {
            mqs = c.fetchSubscribeMessageQueues(topic);
        } catch (MQClientException e) {
            return false;       // a restarted broker has not registered the topic yet
        }
        Map<MessageQueue, ProcessQueue> assigned = c.getDefaultMQPushConsumerImpl().getRebalanceImpl()
            .getProcessQueueTable();
        ConsumeStats stats;
        try {
            stats = admin.examineConsumeStats(group);
        } catch (MQClientException | RemotingException e) {
            return false;       // a restarted broker has not registered the group's retry topic yet, or is slow
        }
        for (MessageQueue mq : mqs) {
            ProcessQueue pq = assigned.get(mq);
            if (pq == null || pq.getMsgCount().get() != 0) {
                return false;
            }
            long max = c.getDefaultMQPushConsumerImpl().maxOffset(mq);
            long mine = c.getDefaultMQPushConsumerImpl().getOffsetStore().readOffset(mq,
                ReadOffsetType.READ_FROM_MEMORY);
            OffsetWrapper ow = stats.getOffsetTable().get(mq);
            if (mine != max || ow == null || ow.getConsumerOffset() != max) {
                return false;
            }
        }
        return true;
    }

    private List<Map<String, Object>> progress(String group) throws Exception {
        List<Map<String, Object>> rows = new ArrayList<>();
        ConsumeStats stats;
        try {
            stats = patiently(() -> admin.examineConsumeStats(group));
        } catch (MQClientException e) {
            if (e.getResponseCode() == ResponseCode.CONSUMER_NOT_ONLINE) {
                return rows;        // the group has committed nothing yet: no progress to report
            }
            throw e;
        }
        for (Map.Entry<MessageQueue, OffsetWrapper> e : stats.getOffsetTable().entrySet()) {
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("broker", e.getKey().getBrokerName());
            row.put("topic", e.getKey().getTopic());
            row.put("queue_id", e.getKey().getQueueId());
            row.put("broker_offset", e.getValue().getBrokerOffset());
            row.put("consumer_offset", e.getValue().getConsumerOffset());
            rows.add(row);
        }
        return rows;
    }

    private List<Map<String, Object>> topicStats(String topic) throws Exception {
        List<Map<String, Object>> rows = new ArrayList<>();
        for (Map.Entry<MessageQueue, TopicOffset> e : patiently(() -> admin.examineTopicStats(topic)).getOffsetTable().entrySet()) {
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("broker", e.getKey().getBrokerName());
            row.put("queue_id", e.getKey().getQueueId());
            row.put("min_offset", e.getValue().getMinOffset());
            row.put("max_offset", e.getValue().getMaxOffset());
            rows.add(row);
        }
        return rows;
    }

    /**
     * Batch sends: each element of {@code batches} is a list of messages sent as one
     * {@code producer.send(Collection)}; on a BatchCQ topic the broker stores each batch as one
     * inner-batch record. One sent line per message: its queue offset is the batch's offset plus
     * its index in the batch.
     */
    private int batchSend(JSONObject cmd) throws Exception {
        Writer w = file(cmd.getString("out"));
        int n = 0;
        int b = 0;
        for (Object o : cmd.getJSONArray("batches")) {
            List<Message> msgs = new ArrayList<>();
            List<JSONObject> specs = new ArrayList<>();
            for (Object x : (JSONArray) o) {
                specs.add((JSONObject) x);
                msgs.add(message((JSONObject) x));
            }
            SendResult r = producer.send(msgs);
            for (int i = 0; i < msgs.size(); i++) {
                Map<String, Object> line = sentLine(specs.get(i), msgs.get(i), r, "sent");
                line.put("uniq_key", MessageClientIDSetter.getUniqID(msgs.get(i)));
                line.put("queue_offset", r.getQueueOffset() + i);
                line.put("batch", b);
                line.put("batch_size", msgs.size());
                write(w, line);
                n++;
            }
            b++;
        }
        return n;
    }

    private DefaultMQPullConsumer pullConsumer(String group, String parentTopic) throws Exception {
        DefaultMQPullConsumer c = pullConsumers.get(group);
        if (c == null) {
            c = new DefaultMQPullConsumer(group);
            c.setNamesrvAddr(namesrv);
            c.setInstanceName("harness-pull-" + group);
            c.setConsumerPullTimeoutMillis(TIMEOUT_MS);
            c.start();
            // an LMQ has no route of its own: the parent topic's fills the client's broker table
            c.getDefaultMQPullConsumerImpl().getRebalanceImpl().getmQClientFactory()
                .updateTopicRouteInfoFromNameServer(parentTopic);
            pullConsumers.put(group, c);
        }
        return c;
    }

    /**
     * A pull consumer of one LMQ queue ({@code %LMQ%...}, queue 0 on {@code broker}) pulls from its
     * committed offset (the queue's minimum if none) to the queue's end, records each message with
     * its LMQ offset (from INNER_MULTI_QUEUE_OFFSET) and commits the end to the broker.
     */
    private int lmqPull(JSONObject cmd) throws Exception {
        String group = cmd.getString("group");
        String queue = cmd.getString("queue");
        DefaultMQPullConsumer c = pullConsumer(group, cmd.getString("parent_topic"));
        MessageQueue mq = new MessageQueue(queue, cmd.getString("broker"), MixAll.LMQ_QUEUE_ID);
        Writer w = file(cmd.getString("out"));
        long offset = c.fetchConsumeOffset(mq, true);
        if (offset < 0) {
            offset = c.minOffset(mq);
        }
        long max = c.maxOffset(mq);
        int n = 0;
        while (offset < max) {
            PullResult r = c.pull(mq, "*", offset, 32);
            if (r.getPullStatus() == PullStatus.FOUND) {
                for (MessageExt msg : r.getMsgFoundList()) {
                    List<String> queues = List.of(msg.getProperty(MessageConst.PROPERTY_INNER_MULTI_DISPATCH)
                        .split(MixAll.LMQ_DISPATCH_SEPARATOR));
                    String[] offsets = msg.getProperty(MessageConst.PROPERTY_INNER_MULTI_QUEUE_OFFSET)
                        .split(MixAll.LMQ_DISPATCH_SEPARATOR);
                    Map<String, Object> line = receivedLine(group, queue, MixAll.LMQ_QUEUE_ID,
                        Long.parseLong(offsets[queues.indexOf(queue)]), msg, cmd.getString("broker"),
                        cmd.getString("phase"));
                    line.put("record_topic", msg.getTopic());
                    line.put("record_queue_offset", msg.getQueueOffset());
                    write(w, line);
                    n++;
                }
            }
            if (r.getNextBeginOffset() <= offset) {
                throw new IllegalStateException("pull of " + mq + " at " + offset + " did not move: " + r);
            }
            offset = r.getNextBeginOffset();
        }
        c.updateConsumeOffset(mq, offset);
        c.getDefaultMQPullConsumerImpl().getOffsetStore().persist(mq);
        return n;
    }

    /**
     * A pull consumer of {@code group} reads every queue of {@code topic} from its committed offset
     * (the queue's minimum if none) to its end, sends each message whose user property
     * {@code fail_property} is "true" back to the broker (sendMessageBack, delay level 0: the
     * broker's 3 + reconsumeTimes, into the group's %RETRY% topic), commits each queue's end and
     * shuts down. It never pulls the retry topic, so the group has no committed offset there.
     * Each message is a received line with {@code consumer} "pull" and {@code result}.
     */
    private int pullFail(JSONObject cmd) throws Exception {
        String group = cmd.getString("group");
        String failProperty = cmd.getString("fail_property");
        Writer w = file(cmd.getString("out"));
        DefaultMQPullConsumer c = pullConsumer(group, cmd.getString("topic"));
        int n = 0;
        try {
            for (MessageQueue mq : c.fetchSubscribeMessageQueues(cmd.getString("topic"))) {
                long offset = c.fetchConsumeOffset(mq, true);
                if (offset < 0) {
                    offset = c.minOffset(mq);
                }
                long max = c.maxOffset(mq);
                while (offset < max) {
                    PullResult r = c.pull(mq, "*", offset, 32);
                    if (r.getPullStatus() == PullStatus.FOUND) {
                        for (MessageExt msg : r.getMsgFoundList()) {
                            boolean fail = "true".equals(msg.getUserProperty(failProperty));
                            if (fail) {
                                c.sendMessageBack(msg, 0, mq.getBrokerName());
                            }
                            Map<String, Object> line = receivedLine(group, msg.getTopic(), mq.getQueueId(),
                                msg.getQueueOffset(), msg, mq.getBrokerName(), cmd.getString("phase"));
                            line.put("consumer", "pull");
                            line.put("result", fail ? "failed" : "consumed");
                            write(w, line);
                            n++;
                        }
                    }
                    if (r.getNextBeginOffset() <= offset) {
                        throw new IllegalStateException("pull of " + mq + " at " + offset + " did not move: " + r);
                    }
                    offset = r.getNextBeginOffset();
                }
                c.updateConsumeOffset(mq, offset);
                c.getDefaultMQPullConsumerImpl().getOffsetStore().persist(mq);
            }
        } finally {
            pullConsumers.remove(group);
            c.shutdown();
        }
        return n;
    }

    /**
     * Sets broker {@code broker}'s brokerPermission to {@code perm} through the admin API
     * (updateBrokerConfig: the broker registers again at once) and waits until the name server's
     * route of {@code topic} shows that broker's queues writable or not as {@code perm} says.
     */
    private void brokerPermission(JSONObject cmd) throws Exception {
        String name = cmd.getString("broker");
        String topic = cmd.getString("topic");
        int perm = cmd.getIntValue("perm");
        Properties properties = new Properties();
        properties.setProperty("brokerPermission", String.valueOf(perm));
        patiently(() -> {
            admin.updateBrokerConfig(cmd.getString("addr"), properties);
            return null;
        });
        long deadline = System.currentTimeMillis() + 30_000;
        while (!patiently(() -> admin.examineTopicRouteInfo(topic)).getQueueDatas().stream().anyMatch(
                q -> q.getBrokerName().equals(name) && PermName.isWriteable(q.getPerm()) == PermName.isWriteable(perm))) {
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("the route of " + topic + " never showed " + name + " with permission " + perm);
            }
            Thread.sleep(200);
        }
    }

    /** An LMQ group's progress as the broker reports it: the queue's min and max and the committed offset. */
    private List<Map<String, Object>> lmqProgress(JSONObject cmd) throws Exception {
        DefaultMQPullConsumer c = pullConsumer(cmd.getString("group"), cmd.getString("parent_topic"));
        MessageQueue mq = new MessageQueue(cmd.getString("queue"), cmd.getString("broker"), MixAll.LMQ_QUEUE_ID);
        Map<String, Object> row = new LinkedHashMap<>();
        row.put("broker", mq.getBrokerName());
        row.put("topic", mq.getTopic());
        row.put("queue_id", mq.getQueueId());
        row.put("min_offset", c.minOffset(mq));
        row.put("broker_offset", c.maxOffset(mq));
        row.put("consumer_offset", c.fetchConsumeOffset(mq, true));
        return List.of(row);
    }

    private Writer file(String path) throws Exception {
        synchronized (files) {
            Writer w = files.get(path);
            if (w == null) {
                w = new OutputStreamWriter(new FileOutputStream(path, true), StandardCharsets.UTF_8);
                files.put(path, w);
            }
            return w;
        }
    }

    private static void write(Writer w, Map<String, Object> line) {
        String text = JSON.toJSONString(line, SerializerFeature.WriteMapNullValue) + "\n";
        synchronized (w) {
            try {
                w.write(text);
                w.flush();
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private void shutdown() throws Exception {
        loopRunning.set(false);
        for (DefaultMQPushConsumer c : consumers.values()) {
            c.shutdown();
        }
        consumers.clear();
        for (DefaultMQPullConsumer c : pullConsumers.values()) {
            c.shutdown();
        }
        pullConsumers.clear();
        if (producer != null) {
            producer.shutdown();
        }
        if (txProducer != null) {
            txProducer.shutdown();
        }
        if (admin != null) {
            admin.shutdown();
        }
        closeFiles();
        stopServers();
    }

    /** Flushes and closes the record files (sent.jsonl, received.jsonl, ...). */
    private void closeFiles() throws IOException {
        synchronized (files) {
            for (Writer w : files.values()) {
                w.close();
            }
            files.clear();
        }
    }

    /** Clean shutdown of the brokers still running here, then of the NameServer (idempotent). */
    private void stopServers() {
        List<BrokerController> running;
        synchronized (brokers) {
            running = new ArrayList<>(brokers.values());
            brokers.clear();
        }
        for (BrokerController controller : running) {
            controller.shutdown();
        }
        NamesrvController ns = namesrvController;
        namesrvController = null;
        if (ns != null) {
            ns.shutdown();
        }
    }
}

package rmqfilter.harness;

import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.broker.BrokerStartup;

/**
 * A broker from its properties file, as {@code mqbroker -c FILE} reads it (every key set on the
 * broker's config objects by the broker's own start-up API).
 *
 * <p>{@code Broker FILE.properties} runs one in its own JVM, with the broker's own shutdown hook:
 * SIGTERM shuts it down cleanly (files flushed, abort file removed) and SIGKILL leaves the store as
 * a crash leaves it. Prints {@code READY} once it serves. The scenarios that never kill a broker
 * run theirs inside the client's JVM instead ({@link #start}, {@link BrokerController#shutdown}):
 * the same start-up and the same clean shutdown, without a JVM to start and warm up per broker.
 */
public final class Broker {
    private Broker() {
    }

    public static void main(String[] args) throws Exception {
        PrintStream out = Stdout.claim();
        BrokerController controller = BrokerStartup.createBrokerController(new String[] {"-c", args[0]});
        BrokerStartup.start(controller);
        registerNow(controller);
        out.println("READY broker " + controller.getBrokerConfig().getBrokerName() + " " + controller.getBrokerAddr());
        Thread.currentThread().join();
    }

    /** Builds, initializes and starts the broker of {@code properties} in this JVM. */
    static BrokerController start(String properties) throws Exception {
        BrokerController controller = build(new String[] {"-c", properties});
        if (!controller.initialize()) {
            controller.shutdown();
            throw new IllegalStateException("broker of " + properties + " failed to initialize (see its log)");
        }
        controller.start();
        registerNow(controller);
        return controller;
    }

    /**
     * {@code BrokerStartup.buildBrokerController} of the command line {@code args}, on either API
     * the pinned releases have (docs/testing.md#releases): up to 5.3.x it takes the command line;
     * from 5.4.0 it takes the {@code ConfigContext} that {@code BrokerStartup.parseCmdLine} makes of
     * it. Looked up by reflection so that one source compiles against both.
     */
    static BrokerController build(String[] args) throws Exception {
        try {
            try {
                Method direct = BrokerStartup.class.getMethod("buildBrokerController", String[].class);
                return (BrokerController) direct.invoke(null, (Object) args);
            } catch (NoSuchMethodException newer) {
                Object context = BrokerStartup.class.getMethod("parseCmdLine", String[].class).invoke(null, (Object) args);
                Method fromContext = BrokerStartup.class.getMethod("buildBrokerController", context.getClass());
                return (BrokerController) fromContext.invoke(null, context);
            }
        } catch (InvocationTargetException e) {
            throw e.getCause() instanceof Exception cause ? cause : e;
        }
    }

    /**
     * Registers the started broker with its NameServer now. {@code BrokerController.start()} tries
     * to, but in RocketMQ 5.3.3 that first registration goes only to the NameServers its remoting
     * client has already found reachable, and the scan that finds them starts in the background at
     * the same moment; it finds none, and the broker becomes visible at its next scheduled
     * registration, 10 s later. So every broker start cost the scenario 10 s of waiting (docs/testing.md#processes).
     */
    static void registerNow(BrokerController controller) throws InterruptedException {
        long deadline = System.currentTimeMillis() + 5000;
        while (controller.getBrokerOuterAPI().getRemotingClient().getAvailableNameSrvList().isEmpty()) {
            if (System.currentTimeMillis() > deadline) {
                return;   // not reachable yet: the broker's own scheduled registration still comes
            }
            Thread.sleep(20);
        }
        controller.registerBrokerAll(true, false, true);
    }
}

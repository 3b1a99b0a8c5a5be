package rmqfilter.harness;

import java.io.PrintStream;
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
        out.println("READY broker " + controller.getBrokerConfig().getBrokerName() + " " + controller.getBrokerAddr());
        Thread.currentThread().join();
    }

    /** Builds, initializes and starts the broker of {@code properties} in this JVM. */
    static BrokerController start(String properties) throws Exception {
        BrokerController controller = BrokerStartup.buildBrokerController(new String[] {"-c", properties});
        if (!controller.initialize()) {
            controller.shutdown();
            throw new IllegalStateException("broker of " + properties + " failed to initialize (see its log)");
        }
        controller.start();
        return controller;
    }
}

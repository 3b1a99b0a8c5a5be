package rmqfilter.harness;

import org.apache.rocketmq.common.MQVersion;
import org.apache.rocketmq.common.namesrv.NamesrvConfig;
import org.apache.rocketmq.namesrv.NamesrvController;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;

/**
 * A NameServer on 127.0.0.1:PORT with its files under HOME. {@code Namesrv PORT HOME} runs one in
 * its own JVM (prints {@code READY} when it listens; SIGTERM shuts it down); the client's JVM starts
 * one in itself with {@link #start}.
 */
public final class Namesrv {
    private Namesrv() {
    }

    public static void main(String[] args) throws Exception {
        java.io.PrintStream out = Stdout.claim();
        int port = Integer.parseInt(args[0]);
        NamesrvController controller = start(port, args[1]);
        Runtime.getRuntime().addShutdownHook(new Thread(controller::shutdown, "namesrv-shutdown"));
        out.println("READY namesrv 127.0.0.1:" + port);
        Thread.currentThread().join();
    }

    /** Initializes and starts a NameServer in this JVM. */
    static NamesrvController start(int port, String home) throws Exception {
        // As the NameServer's own start-up does: requests carry this version (brokers read it).
        System.setProperty(RemotingCommand.REMOTING_VERSION_KEY, Integer.toString(MQVersion.CURRENT_VERSION));
        NamesrvConfig config = new NamesrvConfig();
        config.setRocketmqHome(home);
        config.setKvConfigPath(home + "/kvConfig.json");
        config.setConfigStorePath(home + "/namesrv.properties");
        NettyServerConfig server = new NettyServerConfig();
        server.setBindAddress("127.0.0.1");
        server.setListenPort(port);
        NamesrvController controller = new NamesrvController(config, server, new NettyClientConfig());
        if (!controller.initialize()) {
            throw new IllegalStateException("NameServer failed to initialize");
        }
        controller.start();
        return controller;
    }
}
